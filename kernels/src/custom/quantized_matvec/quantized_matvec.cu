// Body of the quantized matrix-vector kernel (MLX's custom-kernel primitive wraps it in a
// __global__ function whose parameters are the inputs x, packed, scales and the output out; T,
// K, N, M, BLOCK and WARPS are template constants). See quantized_matvec.rs.
//
// One warp per output column n. Each lane takes eight consecutive 4-bit values at a time (one
// 32-bit word: a warp reads 128 contiguous bytes of the column) with the eight matching
// activations of each row (one vector load), and accumulates (q - 8) * x in float32; the
// block's scale multiplies each word's partial sum. The sums are rounded once to T.
constexpr int LANES = 32;
constexpr int WORDS = K / 8;  // 32-bit words of one column
struct alignas(8 * sizeof(T)) Eight { T v[8]; };
const int column = blockIdx.x * WARPS + threadIdx.x / LANES;
const int lane = threadIdx.x % LANES;
if (column >= N) return;
const unsigned int* words = reinterpret_cast<const unsigned int*>(packed) + static_cast<size_t>(column) * WORDS;
const T* column_scales = scales + static_cast<size_t>(column) * (K / BLOCK);

float sums[M];
#pragma unroll
for (int m = 0; m < M; ++m) sums[m] = 0.f;

#pragma unroll 4
for (int word = lane; word < WORDS; word += LANES) {
  const unsigned int bits = words[word];
  const float scale = static_cast<float>(column_scales[(word * 8) / BLOCK]);
  float q[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) q[j] = static_cast<float>(static_cast<int>((bits >> (4 * j)) & 0xFu) - 8);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const Eight xs = *reinterpret_cast<const Eight*>(x + static_cast<size_t>(m) * K + word * 8);
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) dot += q[j] * static_cast<float>(xs.v[j]);
    sums[m] += dot * scale;
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
