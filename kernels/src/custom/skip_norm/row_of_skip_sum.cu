// How per_row.cu reads an element `at` of the block's row for the norm of a skip sum, as ORT's
// skip norms form it (inputs x and skip of type TI, skip_bias float32, output sum; KEEP_SUM and
// HAS_SKIP_BIAS template constants): x + skip (+ skip_bias) in float32, skip's row being the
// block's row modulo skip's rows (ORT reads skip element i % skip's size). The norm reads the
// float32 sum; sum gets it rounded to TI where KEEP_SUM (a single unwritten element otherwise).
auto load = [&](int at) {
  const size_t i = blockIdx.x * static_cast<size_t>(H) + at;
  const size_t k = (blockIdx.x % static_cast<size_t>(skip_shape[0])) * static_cast<size_t>(H) + at;
  float total = static_cast<float>(x[i]) + static_cast<float>(skip[k]);
  if (HAS_SKIP_BIAS) total += skip_bias[at];
  if (KEEP_SUM) sum[i] = static_cast<TI>(total);
  return total;
};
