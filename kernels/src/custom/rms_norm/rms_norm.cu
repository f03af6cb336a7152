// Body of the RMS-norm kernel, after row_of_x.cu and per_row.cu's opening (MLX's
// custom-kernel primitive wraps them in a __global__ function whose parameters are the inputs
// x, weight and the output out; TI, TO, H, THREADS, EPSILON_MAGNITUDE and EPSILON_NEGATIVE
// (the epsilon, see float_constant in custom/mod.rs) are template constants). See mod.rs.
//
// The block sums the squares of the row's elements, and each element is scaled and weighted in
// float32 and rounded once to TO.
float squares = 0.f;
#pragma unroll
for (int k = 0; k < PER; ++k) squares += v[k] * v[k];
const float inverse_rms = rsqrtf(block_sum(squares) / static_cast<float>(H) + (EPSILON_NEGATIVE ? -1.f : 1.f) * __int_as_float(EPSILON_MAGNITUDE));
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  if (at < H) out[row * H + at] = static_cast<TO>(v[k] * inverse_rms * weight[at]);
}
