// Body of the decode-attention kernels (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs q, keys, values, lo, hi, scale (the paged kernel
// adds table) and the output out; T, D, HQ, HKV, S and WARPS are template constants, with P for
// a contiguous buffer and NB, BS, M for a block pool). Where a key's row lies is the one
// difference between the two, generated into the ROWS line below. See decode_attention.rs.
//
// One block per query row (b, h, s). The row's visible keys [lo, hi) go in passes of one key
// per thread: each thread scores its whole key (16-byte loads), the block takes the pass's max
// and sum, then threads split the pass's values into (key group, 16-byte column chunk) pairs.
// A decode step's few hundred keys are one or two passes, each a handful of memory round
// trips, where walking the keys one at a time per warp costs one round trip a key.
constexpr int THREADS = WARPS * 32;
constexpr int E = 16 / sizeof(T);         // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;             // chunks in a row (D is a multiple of E)
constexpr int GROUPS = THREADS / CHUNKS;  // key groups of the value pass
const int row = blockIdx.x;  // ((b * HQ) + h) * S + s: q and out are row-contiguous
const int s_index = row % S;
const int head = (row / S) % HQ;
const int batch = row / (S * HQ);
const int kv_head = head / (HQ / HKV);
const int tid = threadIdx.x;
const int warp = tid / 32;
const int lane = tid % 32;
// ROWS: the key rows' count and `row_start(j)` (generated, see decode_attention.rs)
const int first = max(lo[batch * S + s_index], 0);
const int end = min(hi[batch * S + s_index], ROWS);
const float scaling = scale[0];
// Whether every row starts on a 16-byte boundary (block-uniform: one branch for all).
const bool aligned = ((reinterpret_cast<size_t>(keys) | reinterpret_cast<size_t>(values)) %
                      16) == 0;

__shared__ float q_row[D];
__shared__ float probability[THREADS];
__shared__ float reduced[WARPS];
__shared__ float partial[GROUPS * D];
for (int d = tid; d < D; d += THREADS) {
  q_row[d] = static_cast<float>(q[static_cast<size_t>(row) * D + d]);
}

// The E elements of chunk `c` of row `j` of `base`, widened to float32.
auto load_chunk = [&](const T* base, int j, int c, float* to) {
  const T* at = base + row_start(j) + c * E;
  if (aligned) {
    const uint4 chunk = *reinterpret_cast<const uint4*>(at);
    const T* items = reinterpret_cast<const T*>(&chunk);
#pragma unroll
    for (int e = 0; e < E; ++e) to[e] = static_cast<float>(items[e]);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) to[e] = static_cast<float>(at[e]);
  }
};

// Block-wide max or sum of one value per thread.
auto block_reduce = [&](float v, bool take_max) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = take_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // `reduced` is free again
  if (lane == 0) reduced[warp] = v;
  __syncthreads();
  float all = take_max ? -INFINITY : 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) all = take_max ? fmaxf(all, reduced[w]) : all + reduced[w];
  return all;
};

const int group = tid / CHUNKS;
const int column = tid % CHUNKS;
float acc[E];
#pragma unroll
for (int e = 0; e < E; ++e) acc[e] = 0.f;
float running_max = -INFINITY;  // of the finite scores so far (fmaxf skips NaN)
float running_sum = 0.f;
__syncthreads();  // q_row is written

for (int base = first; base < end; base += THREADS) {
  const int j = base + tid;
  const bool visible = j < end;
  float x = -INFINITY;
  if (visible) {
    float dot = 0.f;
    for (int c = 0; c < CHUNKS; ++c) {
      float k[E];
      load_chunk(keys, j, c, k);
#pragma unroll
      for (int e = 0; e < E; ++e) dot += q_row[c * E + e] * k[e];
    }
    x = dot * scaling;
    // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
    if (x == INFINITY) x = NAN;
  }
  const float next_max = fmaxf(running_max, block_reduce(x, true));
  // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
  const float p = (visible && x != -INFINITY) ? expf(x - next_max) : 0.f;
  probability[tid] = p;
  const float pass_sum = block_reduce(p, false);  // its syncs also publish `probability`
  const float rescale = running_max == -INFINITY ? 0.f : expf(running_max - next_max);
  running_sum = running_sum * rescale + pass_sum;
  running_max = next_max;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] *= rescale;
  if (group < GROUPS) {
    const int keys_here = min(THREADS, end - base);
    for (int k = group; k < keys_here; k += GROUPS) {
      const float weight = probability[k];
      float v[E];
      load_chunk(values, base + k, column, v);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] += weight * v[e];
    }
  }
  __syncthreads();  // `probability` is read before the next pass writes it
}

if (group < GROUPS) {
#pragma unroll
  for (int e = 0; e < E; ++e) partial[group * D + column * E + e] = acc[e];
}
__syncthreads();
for (int d = tid; d < D; d += THREADS) {
  float result;
  if (first >= end) {
    result = 0.f;  // no visible key: zeros
  } else if (running_max == -INFINITY) {
    result = NAN;  // no finite score: the softmax is 0/0
  } else {
    float mixed = 0.f;
    for (int g = 0; g < GROUPS; ++g) mixed += partial[g * D + d];
    result = mixed / running_sum;
  }
  out[static_cast<size_t>(row) * D + d] = static_cast<T>(result);
}
