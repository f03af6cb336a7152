// Metal twin of layer_norm.cu (see there): the same body after per_row.metal's opening, its
// block sums through the block_sum macro.
float row_total = 0.f;
for (int k = 0; k < PER; ++k) row_total += v[k];
float mean;
block_sum(row_total, mean);
mean /= static_cast<float>(H);
float squares = 0.f;
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  const float deviation = at < H ? v[k] - mean : 0.f;
  squares += deviation * deviation;
}
float variance;
block_sum(squares, variance);
variance /= static_cast<float>(H);
const float inverse_std = rsqrt(variance + (EPSILON_NEGATIVE ? -1.f : 1.f) * as_type<float>(EPSILON_MAGNITUDE));
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  if (at < H) {
    const float shift = HAS_BIAS ? bias[at] : 0.f;
    out[row * H + at] = static_cast<TO>((v[k] - mean) * inverse_std * weight[at] + shift);
  }
}
