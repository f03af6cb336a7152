// Body of the decode-attention kernel (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs q, keys, values, lo, hi, scale and the output out;
// T, D, HQ, HKV, S, P and WARPS are template constants). See decode_attention.rs.
//
// One block per query row (b, h, s); WARPS warps split the row's visible keys [lo, hi), each
// keeping an online softmax in float32; the warps' partial results are merged at the end.
constexpr int LANES = 32;
constexpr int PER_LANE = (D + LANES - 1) / LANES;
const int row = blockIdx.x;  // ((b * HQ) + h) * S + s: q and out are row-contiguous
const int s_index = row % S;
const int head = (row / S) % HQ;
const int batch = row / (S * HQ);
const int kv_head = head / (HQ / HKV);
const int warp = threadIdx.x / LANES;
const int lane = threadIdx.x % LANES;
const size_t kv_offset = (static_cast<size_t>(batch) * HKV + kv_head) * P * D;
const int first = max(lo[batch * S + s_index], 0);
const int end = min(hi[batch * S + s_index], P);
const float scaling = scale[0];

float qv[PER_LANE];
float acc[PER_LANE];
#pragma unroll
for (int i = 0; i < PER_LANE; ++i) {
  const int d = lane + i * LANES;
  qv[i] = d < D ? static_cast<float>(q[static_cast<size_t>(row) * D + d]) : 0.f;
  acc[i] = 0.f;
}
float running_max = -INFINITY;
float running_sum = 0.f;
bool seen = false;
for (int j = first + warp; j < end; j += WARPS) {
  const T* k_row = keys + kv_offset + static_cast<size_t>(j) * D;
  const T* v_row = values + kv_offset + static_cast<size_t>(j) * D;
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + i * LANES;
    if (d < D) dot += qv[i] * static_cast<float>(k_row[d]);
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    dot += __shfl_xor_sync(0xffffffffu, dot, offset);
  }
  float x = dot * scaling;
  // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
  if (x == INFINITY) x = NAN;
  if (!seen) {
    running_max = x;
    running_sum = 1.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int d = lane + i * LANES;
      acc[i] = d < D ? static_cast<float>(v_row[d]) : 0.f;
    }
    seen = true;
  } else {
    const float next_max = fmaxf(running_max, x);
    const float rescale = expf(running_max - next_max);
    const float p = expf(x - next_max);
    running_sum = running_sum * rescale + p;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int d = lane + i * LANES;
      const float v = d < D ? static_cast<float>(v_row[d]) : 0.f;
      acc[i] = acc[i] * rescale + p * v;
    }
    running_max = next_max;
  }
}

__shared__ float warp_max[WARPS];
__shared__ float warp_sum[WARPS];
__shared__ bool warp_seen[WARPS];
__shared__ float warp_acc[WARPS * D];
if (lane == 0) {
  warp_max[warp] = running_max;
  warp_sum[warp] = running_sum;
  warp_seen[warp] = seen;
}
#pragma unroll
for (int i = 0; i < PER_LANE; ++i) {
  const int d = lane + i * LANES;
  if (d < D) warp_acc[warp * D + d] = acc[i];
}
__syncthreads();

for (int d = threadIdx.x; d < D; d += blockDim.x) {
  bool any = false;
  float top = -INFINITY;
  for (int w = 0; w < WARPS; ++w) {
    if (warp_seen[w]) {
      any = true;
      top = fmaxf(top, warp_max[w]);
    }
  }
  float result;
  if (!any) {
    result = 0.f;  // no visible key: zeros
  } else if (top == -INFINITY) {
    result = NAN;  // every score -inf (or NaN): the softmax is 0/0
  } else {
    float total = 0.f;
    float mixed = 0.f;
    for (int w = 0; w < WARPS; ++w) {
      if (warp_seen[w]) {
        const float f = expf(warp_max[w] - top);
        total += warp_sum[w] * f;
        mixed += warp_acc[w * D + d] * f;
      }
    }
    result = mixed / total;
  }
  out[static_cast<size_t>(row) * D + d] = static_cast<T>(result);
}
