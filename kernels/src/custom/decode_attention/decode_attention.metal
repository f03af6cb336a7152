// Metal twin of decode_attention.cu: the same algorithm, line for line, in Metal's dialect
// (MLX's metal_kernel wraps it in a [[kernel]] function templated on the same constants, with
// the same inputs and output). What differs is only the spelling: threadgroup memory for
// __shared__, barriers for __syncthreads, SIMD-group shuffles for warp shuffles, element loads
// for the 16-byte vector loads (Metal has no lambdas, so the loads and reductions are written
// out), and 8 SIMD groups a block (Apple GPUs give a threadgroup 32 KiB of memory).
constexpr int THREADS = WARPS * 32;
constexpr int E = 16 / sizeof(T);         // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;             // chunks in a row (D is a multiple of E)
constexpr int GROUPS = THREADS / CHUNKS;  // key groups of the value pass
constexpr int HEAD_GROUPS = HQ / HKV / GH;
constexpr int VALUE_LOADS = 4;            // value chunks a thread loads before summing them
constexpr int KEY_LOADS = CHUNKS < 8 ? CHUNKS : 8;  // key chunks loaded before any is used
const int split = int(threadgroup_position_in_grid.x) % SPLITS;
const int cell = int(threadgroup_position_in_grid.x) / SPLITS;
const int s_index = cell % S;
const int head_group = (cell / S) % HEAD_GROUPS;
const int kv_head = (cell / (S * HEAD_GROUPS)) % HKV;
const int batch = cell / (S * HEAD_GROUPS * HKV);
const int first_head = kv_head * (HQ / HKV) + head_group * GH;
#define Q_ROW(g) ((static_cast<size_t>(batch) * HQ + first_head + (g)) * S + s_index)
const int tid = int(thread_position_in_threadgroup.x);
const int warp = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
// ROWS: the key rows' count and ROW_START(j) (generated, see mod.rs)
// Clamped before any arithmetic: extreme lo/hi cannot overflow.
const int visible_first = min(max(bounds[2 * (batch * S + s_index)], 0), ROWS);
const int visible_end = max(min(bounds[2 * (batch * S + s_index) + 1], ROWS), visible_first);
// This split's share of the visible keys (empty when the range is short).
const int share = (visible_end - visible_first + SPLITS - 1) / SPLITS;
const int first = min(visible_first + split * share, visible_end);
const int end = min(first + share, visible_end);
const float scaling = (SCALE_NEGATIVE ? -1.f : 1.f) * as_type<float>(SCALE_MAGNITUDE);

threadgroup float q_rows[GH][D];
threadgroup float probability[GH][THREADS];
threadgroup float reduced[GH][WARPS];
threadgroup float partial[GROUPS * D];
for (int i = tid; i < GH * D; i += THREADS) {
  q_rows[i / D][i % D] = static_cast<float>(q[Q_ROW(i / D) * D + i % D]);
}

const int group = tid / CHUNKS;
const int column = tid % CHUNKS;
float acc[GH][E];
float running_max[GH];  // of the finite scores so far (fmax skips NaN)
float running_sum[GH];
for (int g = 0; g < GH; ++g) {
  running_max[g] = -INFINITY;
  running_sum[g] = 0.f;
  for (int e = 0; e < E; ++e) acc[g][e] = 0.f;
}
threadgroup_barrier(mem_flags::mem_threadgroup);  // q_rows is written

for (int base = first; base < end; base += THREADS) {
  const int j = base + tid;
  const bool visible = j < end;
  float x[GH];
  for (int g = 0; g < GH; ++g) x[g] = 0.f;
  if (visible) {
    const size_t row = ROW_START(j);
    for (int c0 = 0; c0 < CHUNKS; c0 += KEY_LOADS) {
      T chunks[KEY_LOADS][E];  // one memory round trip for KEY_LOADS chunks of the key
      for (int u = 0; u < KEY_LOADS; ++u) {
        for (int e = 0; e < E; ++e) {
          chunks[u][e] = c0 + u < CHUNKS ? keys[row + (c0 + u) * E + e] : static_cast<T>(0.f);
        }
      }
      for (int u = 0; u < KEY_LOADS; ++u) {
        if (c0 + u >= CHUNKS) break;
        for (int g = 0; g < GH; ++g) {
          for (int e = 0; e < E; ++e) {
            x[g] += q_rows[g][(c0 + u) * E + e] * static_cast<float>(chunks[u][e]);
          }
        }
      }
    }
  }
  float pass_max[GH];
  for (int g = 0; g < GH; ++g) {
    x[g] = visible ? x[g] * scaling : -INFINITY;
    // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
    if (x[g] == INFINITY) x[g] = NAN;
    pass_max[g] = x[g];
  }
  // Block-wide maxima: within each SIMD group, then across them.
  for (int g = 0; g < GH; ++g) {
    for (ushort offset = 16; offset > 0; offset /= 2) {
      pass_max[g] = fmax(pass_max[g], simd_shuffle_xor(pass_max[g], offset));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // `reduced` is free again
  if (lane == 0) {
    for (int g = 0; g < GH; ++g) reduced[g][warp] = pass_max[g];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int g = 0; g < GH; ++g) {
    float all = -INFINITY;
    for (int w = 0; w < WARPS; ++w) all = fmax(all, reduced[g][w]);
    pass_max[g] = all;
  }
  float p[GH];
  float rescale[GH];
  for (int g = 0; g < GH; ++g) {
    const float next_max = fmax(running_max[g], pass_max[g]);
    // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
    p[g] = (visible && x[g] != -INFINITY) ? exp(x[g] - next_max) : 0.f;
    probability[g][tid] = p[g];
    rescale[g] = running_max[g] == -INFINITY ? 0.f : exp(running_max[g] - next_max);
    running_max[g] = next_max;
  }
  // Block-wide sums, the same way; the barriers also publish `probability`.
  for (int g = 0; g < GH; ++g) {
    for (ushort offset = 16; offset > 0; offset /= 2) {
      p[g] += simd_shuffle_xor(p[g], offset);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) {
    for (int g = 0; g < GH; ++g) reduced[g][warp] = p[g];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int g = 0; g < GH; ++g) {
    float all = 0.f;
    for (int w = 0; w < WARPS; ++w) all += reduced[g][w];
    p[g] = all;
  }
  for (int g = 0; g < GH; ++g) {
    running_sum[g] = running_sum[g] * rescale[g] + p[g];
    for (int e = 0; e < E; ++e) acc[g][e] *= rescale[g];
  }
  if (group < GROUPS) {
    const int keys_here = min(THREADS, end - base);
    for (int k0 = group; k0 < keys_here; k0 += GROUPS * VALUE_LOADS) {
      T chunks[VALUE_LOADS][E];  // VALUE_LOADS keys' chunks: one memory round trip for all
      for (int u = 0; u < VALUE_LOADS; ++u) {
        const int k = k0 + u * GROUPS;
        const size_t row = k < keys_here ? ROW_START(base + k) : 0;
        for (int e = 0; e < E; ++e) {
          chunks[u][e] = k < keys_here ? values[row + column * E + e] : static_cast<T>(0.f);
        }
      }
      for (int u = 0; u < VALUE_LOADS; ++u) {
        const int k = k0 + u * GROUPS;
        if (k >= keys_here) break;
        float v[E];
        for (int e = 0; e < E; ++e) v[e] = static_cast<float>(chunks[u][e]);
        for (int g = 0; g < GH; ++g) {
          const float weight = probability[g][k];
          for (int e = 0; e < E; ++e) acc[g][e] += weight * v[e];
        }
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // `probability` is read before the next pass
}

// Each head in turn: the key groups' sums, then the row's result (or partial sums).
for (int g = 0; g < GH; ++g) {
  if (group < GROUPS) {
    for (int e = 0; e < E; ++e) partial[group * D + column * E + e] = acc[g][e];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int d = tid; d < D; d += THREADS) {
    float mixed = 0.f;
    for (int k = 0; k < GROUPS; ++k) mixed += partial[k * D + d];
    // WRITE: the row's result or the split's partial sums (generated, see mod.rs)
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // `partial` is read before the next head
}
