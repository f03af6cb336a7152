// Metal twin of rms_norm.cu (see there): the same body after row_of_x.metal and
// per_row.metal's opening, its block sum through the block_sum macro.
float squares = 0.f;
for (int k = 0; k < PER; ++k) squares += v[k] * v[k];
float mean_square;
block_sum(squares, mean_square);
mean_square /= static_cast<float>(H);
const float inverse_rms = rsqrt(mean_square + (EPSILON_NEGATIVE ? -1.f : 1.f) * as_type<float>(EPSILON_MAGNITUDE));
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  if (at < H) out[row * H + at] = static_cast<TO>(v[k] * inverse_rms * weight[at]);
}
