// Metal twin of row_of_skip_sum.cu (see there): an element `at` of the threadgroup's row is
// x + skip (+ skip_bias) in float32, skip's row the row modulo skip's rows; stored in sum,
// rounded to TI, where KEEP_SUM.
#define load_into(dst, at)                                                                 \
  {                                                                                        \
    const size_t i_ = row * H + (at);                                                      \
    const size_t k_ = (row % static_cast<size_t>(skip_shape[0])) * H + (at);               \
    float total_ = static_cast<float>(x[i_]) + static_cast<float>(skip[k_]);               \
    if (HAS_SKIP_BIAS) total_ += skip_bias[at];                                            \
    if (KEEP_SUM) sum[i_] = static_cast<TI>(total_);                                       \
    dst = total_;                                                                          \
  }
