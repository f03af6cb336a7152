// How per_row.cu reads an element `at` of the block's row for a layer norm of a residual sum
// (inputs x and residual of type TI, output sum; KEEP_SUM a template constant): x + residual
// rounded to TI, bit for bit what MLX's add gives (their float32 sum rounds to TI as the exact
// sum does, float32 having more than twice TI's precision plus two bits), stored in sum where
// KEEP_SUM (sum is a single unwritten element otherwise).
auto load = [&](int at) {
  const size_t i = blockIdx.x * static_cast<size_t>(H) + at;
  const TI total = static_cast<TI>(static_cast<float>(x[i]) + static_cast<float>(residual[i]));
  if (KEEP_SUM) sum[i] = total;
  return static_cast<float>(total);
};
