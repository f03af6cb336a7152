// The opening both row-wise norm bodies share (joined after a file that defines `load`, how an
// element of the row is read: row_of_x.cu, layer_norm/row_of_sum.cu; and before the body:
// rms_norm.cu, layer_norm.cu; each wrapper says which). MLX's custom-kernel primitive wraps the
// whole in a __global__ function; H and THREADS are template constants.
//
// One block per row of H elements. Each thread loads its elements of the row into float32
// registers `v` (zero past the row's end), and `block_sum` sums a value over the block.
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
float v[PER];
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  v[k] = at < H ? load(at) : 0.f;
}
