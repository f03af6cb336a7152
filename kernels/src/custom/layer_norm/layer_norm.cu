// Body of the layer-norm kernel (MLX's custom-kernel primitive wraps it in a __global__ function
// whose parameters are the inputs x, weight, bias and the output out; TI, TO, H, THREADS,
// HAS_BIAS, EPSILON_MAGNITUDE and EPSILON_NEGATIVE (the epsilon, see float_constant in
// custom/mod.rs) are template constants). See mod.rs.
//
// One block per row of H elements: each thread keeps its elements in float32 registers; the
// block sums them for the mean, then sums the squared deviations from it (two passes over the
// registers, so the variance does not cancel), and each element is normalised, weighted and
// shifted in float32 and rounded once to TO. Without HAS_BIAS the bias operand is not read.
constexpr int PER = (H + THREADS - 1) / THREADS;
constexpr int WARPS = THREADS / 32;
__shared__ float partial[WARPS];
const size_t row = blockIdx.x;
const int tid = threadIdx.x;
// The sum of `value` over the block, in every thread: warp shuffles, then one warp over the
// warps' sums. It ends with a barrier, so `partial` may be written again after it.
auto block_sum = [&](float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (tid % 32 == 0) partial[tid / 32] = value;
  __syncthreads();
  if (tid < 32) {
    float total = tid < WARPS ? partial[tid] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
    if (tid == 0) partial[0] = total;
  }
  __syncthreads();
  const float total = partial[0];
  __syncthreads();
  return total;
};
const TI* in = x + row * H;
float v[PER];
float sum = 0.f;
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  v[k] = at < H ? static_cast<float>(in[at]) : 0.f;
  sum += v[k];
}
const float mean = block_sum(sum) / static_cast<float>(H);
float squares = 0.f;
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  const float deviation = at < H ? v[k] - mean : 0.f;
  squares += deviation * deviation;
}
const float inverse_std = rsqrtf(block_sum(squares) / static_cast<float>(H) + (EPSILON_NEGATIVE ? -1.f : 1.f) * __int_as_float(EPSILON_MAGNITUDE));
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  if (at < H) {
    const float shift = HAS_BIAS ? bias[at] : 0.f;
    out[row * H + at] = static_cast<TO>((v[k] - mean) * inverse_std * weight[at] + shift);
  }
}
