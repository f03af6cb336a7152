// Body of the layer-norm kernels, after a row loader and per_row.cu's opening (MLX's
// custom-kernel primitive wraps them in a __global__ function whose parameters are the inputs
// x, weight, bias (and residual, for the norm of a sum) and the outputs out (and sum); TI, TO,
// H, THREADS, HAS_BIAS, EPSILON_MAGNITUDE and EPSILON_NEGATIVE (the epsilon, see
// float_constant in custom/mod.rs) are template constants). See mod.rs.
//
// The block sums the row's elements for the mean, then the squared deviations from it (two
// passes over the registers, so the variance does not cancel), and each element is
// normalised, weighted and shifted in float32 and rounded once to TO. Without HAS_BIAS the
// bias operand is not read.
float row_total = 0.f;
#pragma unroll
for (int k = 0; k < PER; ++k) row_total += v[k];
const float mean = block_sum(row_total) / static_cast<float>(H);
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
