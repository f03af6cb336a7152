// Body of the decode-attention kernels (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs q, keys, values, bounds (each query row's lo and
// hi side by side; the paged kernel adds table) and the output out; T, D, HQ, HKV, S, GH,
// SPLITS, WARPS, SCALE_MAGNITUDE and SCALE_NEGATIVE (the score scale, see float_constant in
// custom/mod.rs) are template constants, with P for a contiguous buffer and NB, BS, M for a
// block pool). Two lines are generated (see mod.rs): ROWS, where a key's row lies, and WRITE,
// whether a block writes its rows' results or its split's partial sums for combine_splits.cu.
//
// One block per (b, key head, group of GH query heads, s, split): the GH query heads of one key
// head read each key and value once. The block's share of the visible keys [lo, hi) goes in
// passes of one key per thread: each thread scores its whole key against every head (16-byte
// loads), the block takes the pass's maxima and sums, then threads split the pass's values into
// (key group, 16-byte column chunk) pairs. A decode step's few hundred keys are one or two
// passes, each a handful of memory round trips, where walking the keys one at a time per warp
// costs one round trip a key. SPLITS > 1 splits a long key range over blocks (flash-decoding).
constexpr int THREADS = WARPS * 32;
constexpr int E = 16 / sizeof(T);         // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;             // chunks in a row (D is a multiple of E)
constexpr int GROUPS = THREADS / CHUNKS;  // key groups of the value pass
constexpr int HEAD_GROUPS = HQ / HKV / GH;
constexpr int VALUE_LOADS = 4;            // value chunks a thread loads before summing them
constexpr int KEY_LOADS = CHUNKS < 8 ? CHUNKS : 8;  // key chunks loaded before any is used
const int split = blockIdx.x % SPLITS;
const int cell = blockIdx.x / SPLITS;  // ((b * HKV + kv_head) * HEAD_GROUPS + group) * S + s
const int s_index = cell % S;
const int head_group = (cell / S) % HEAD_GROUPS;
const int kv_head = (cell / (S * HEAD_GROUPS)) % HKV;
const int batch = cell / (S * HEAD_GROUPS * HKV);
const int first_head = kv_head * (HQ / HKV) + head_group * GH;
// q and out are row-contiguous [B, HQ, S, D]: the row of member g of the head group.
#define Q_ROW(g) ((static_cast<size_t>(batch) * HQ + first_head + (g)) * S + s_index)
const int tid = threadIdx.x;
const int warp = tid / 32;
const int lane = tid % 32;
// ROWS: the key rows' count and ROW_START(j) (generated, see mod.rs)
// Clamped before any arithmetic: extreme lo/hi cannot overflow.
const int visible_first = min(max(bounds[2 * (batch * S + s_index)], 0), ROWS);
const int visible_end = max(min(bounds[2 * (batch * S + s_index) + 1], ROWS), visible_first);
// This split's share of the visible keys (empty when the range is short).
const int share = (visible_end - visible_first + SPLITS - 1) / SPLITS;
const int first = min(visible_first + split * share, visible_end);
const int end = min(first + share, visible_end);
const float scaling = (SCALE_NEGATIVE ? -1.f : 1.f) * __int_as_float(SCALE_MAGNITUDE);
// Whether every row starts on a 16-byte boundary (block-uniform: one branch for all).
const bool aligned = ((reinterpret_cast<size_t>(keys) | reinterpret_cast<size_t>(values)) %
                      16) == 0;

__shared__ float q_rows[GH][D];
__shared__ float probability[GH][THREADS];
__shared__ float reduced[GH][WARPS];
__shared__ float partial[GROUPS * D];
for (int i = tid; i < GH * D; i += THREADS) {
  q_rows[i / D][i % D] = static_cast<float>(q[Q_ROW(i / D) * D + i % D]);
}

// Chunk `c` of the row at `row_start` of `base` as its 16 raw bytes, and those bytes widened to float32:
// apart, so that several loads can be in flight before any of them is used.
auto load_raw = [&](const T* base, size_t row_start, int c) {
  const T* at = base + row_start + c * E;
  if (aligned) return *reinterpret_cast<const uint4*>(at);
  uint4 chunk;
  T* items = reinterpret_cast<T*>(&chunk);
#pragma unroll
  for (int e = 0; e < E; ++e) items[e] = at[e];
  return chunk;
};
auto widen = [&](const uint4& chunk, float* to) {
  const T* items = reinterpret_cast<const T*>(&chunk);
#pragma unroll
  for (int e = 0; e < E; ++e) to[e] = static_cast<float>(items[e]);
};

// Block-wide max or sum of one value per thread, for each head at once.
auto block_reduce = [&](float (&v)[GH], bool take_max) {
#pragma unroll
  for (int g = 0; g < GH; ++g) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, v[g], offset);
      v[g] = take_max ? fmaxf(v[g], other) : v[g] + other;
    }
  }
  __syncthreads();  // `reduced` is free again
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GH; ++g) reduced[g][warp] = v[g];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < GH; ++g) {
    float all = take_max ? -INFINITY : 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      all = take_max ? fmaxf(all, reduced[g][w]) : all + reduced[g][w];
    }
    v[g] = all;
  }
};

const int group = tid / CHUNKS;
const int column = tid % CHUNKS;
float acc[GH][E];
float running_max[GH];  // of the finite scores so far (fmaxf skips NaN)
float running_sum[GH];
#pragma unroll
for (int g = 0; g < GH; ++g) {
  running_max[g] = -INFINITY;
  running_sum[g] = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[g][e] = 0.f;
}
__syncthreads();  // q_rows is written

for (int base = first; base < end; base += THREADS) {
  const int j = base + tid;
  const bool visible = j < end;
  float x[GH];
#pragma unroll
  for (int g = 0; g < GH; ++g) x[g] = 0.f;
  if (visible) {
    const size_t row = ROW_START(j);
    for (int c0 = 0; c0 < CHUNKS; c0 += KEY_LOADS) {
      uint4 chunks[KEY_LOADS];  // one memory round trip for KEY_LOADS chunks of the key
#pragma unroll
      for (int u = 0; u < KEY_LOADS; ++u) {
        chunks[u] = c0 + u < CHUNKS ? load_raw(keys, row, c0 + u) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < KEY_LOADS; ++u) {
        if (c0 + u >= CHUNKS) break;
        float k[E];
        widen(chunks[u], k);
#pragma unroll
        for (int g = 0; g < GH; ++g) {
#pragma unroll
          for (int e = 0; e < E; ++e) x[g] += q_rows[g][(c0 + u) * E + e] * k[e];
        }
      }
    }
  }
  float pass_max[GH];
#pragma unroll
  for (int g = 0; g < GH; ++g) {
    x[g] = visible ? x[g] * scaling : -INFINITY;
    // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
    if (x[g] == INFINITY) x[g] = NAN;
    pass_max[g] = x[g];
  }
  block_reduce(pass_max, true);
  float p[GH];
  float rescale[GH];
#pragma unroll
  for (int g = 0; g < GH; ++g) {
    const float next_max = fmaxf(running_max[g], pass_max[g]);
    // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
    p[g] = (visible && x[g] != -INFINITY) ? expf(x[g] - next_max) : 0.f;
    probability[g][tid] = p[g];
    rescale[g] = running_max[g] == -INFINITY ? 0.f : expf(running_max[g] - next_max);
    running_max[g] = next_max;
  }
  block_reduce(p, false);  // its syncs also publish `probability`
#pragma unroll
  for (int g = 0; g < GH; ++g) {
    running_sum[g] = running_sum[g] * rescale[g] + p[g];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] *= rescale[g];
  }
  if (group < GROUPS) {
    const int keys_here = min(THREADS, end - base);
    for (int k0 = group; k0 < keys_here; k0 += GROUPS * VALUE_LOADS) {
      uint4 chunks[VALUE_LOADS];  // VALUE_LOADS keys' chunks: one memory round trip for all
#pragma unroll
      for (int u = 0; u < VALUE_LOADS; ++u) {
        const int k = k0 + u * GROUPS;
        chunks[u] =
            k < keys_here ? load_raw(values, ROW_START(base + k), column) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < VALUE_LOADS; ++u) {
        const int k = k0 + u * GROUPS;
        if (k >= keys_here) break;
        float v[E];
        widen(chunks[u], v);
#pragma unroll
        for (int g = 0; g < GH; ++g) {
          const float weight = probability[g][k];
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] += weight * v[e];
        }
      }
    }
  }
  __syncthreads();  // `probability` is read before the next pass writes it
}

// Each head in turn: the key groups' sums, then the row's result (or partial sums).
#pragma unroll
for (int g = 0; g < GH; ++g) {
  if (group < GROUPS) {
#pragma unroll
    for (int e = 0; e < E; ++e) partial[group * D + column * E + e] = acc[g][e];
  }
  __syncthreads();
  for (int d = tid; d < D; d += THREADS) {
    float mixed = 0.f;
    for (int k = 0; k < GROUPS; ++k) mixed += partial[k * D + d];
    // WRITE: the row's result or the split's partial sums (generated, see mod.rs)
  }
  __syncthreads();  // `partial` is read before the next head writes it
}
