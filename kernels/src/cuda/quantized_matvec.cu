// Body of the quantized matrix-vector kernel (MLX's custom-kernel primitive wraps it in a
// __global__ function whose parameters are the inputs x, packed, scales and the output out; T,
// K, N, M, BLOCK and WARPS are template constants). See quantized_matvec.rs.
//
// One warp per output column n: the warp streams column n's packed 4-bit weights (16 bytes a
// lane at a time), dequantises each value as (q - 8) * scale in float32 and accumulates all M
// rows of x in float32; the sums are rounded once to T.
constexpr int LANES = 32;
constexpr int VALUES_PER_LOAD = 32;  // one uint4 load: 16 bytes = 32 four-bit values
constexpr int LOADS = K / VALUES_PER_LOAD;
constexpr int BLOCKS = K / BLOCK;
const int column = blockIdx.x * WARPS + threadIdx.x / LANES;
const int lane = threadIdx.x % LANES;
if (column >= N) return;
const uint4* weights = reinterpret_cast<const uint4*>(packed) + static_cast<size_t>(column) * LOADS;
const T* column_scales = scales + static_cast<size_t>(column) * BLOCKS;

float sums[M];
#pragma unroll
for (int m = 0; m < M; ++m) sums[m] = 0.f;

for (int load = lane; load < LOADS; load += LANES) {
  const uint4 word4 = weights[load];
  const unsigned int words[4] = {word4.x, word4.y, word4.z, word4.w};
  const int first = load * VALUES_PER_LOAD;
  const float scale = static_cast<float>(column_scales[first / BLOCK]);
  float w[VALUES_PER_LOAD];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      w[i * 8 + j] = static_cast<float>(static_cast<int>((words[i] >> (4 * j)) & 0xFu) - 8) * scale;
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const T* row = x + static_cast<size_t>(m) * K + first;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < VALUES_PER_LOAD; ++i) acc += w[i] * static_cast<float>(row[i]);
    sums[m] += acc;
  }
}

#pragma unroll
for (int m = 0; m < M; ++m) {
  float total = sums[m];
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  }
  if (lane == 0) out[static_cast<size_t>(m) * N + column] = static_cast<T>(total);
}
