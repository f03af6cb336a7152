// Metal twin of row_of_sum.cu (see there): an element `at` of the threadgroup's row is
// x + residual rounded to TI, stored in sum where KEEP_SUM.
#define load_into(dst, at)                                                                 \
  {                                                                                        \
    const size_t i_ = row * H + (at);                                                      \
    const TI total_ = static_cast<TI>(static_cast<float>(x[i_]) + static_cast<float>(residual[i_])); \
    if (KEEP_SUM) sum[i_] = total_;                                                        \
    dst = static_cast<float>(total_);                                                      \
  }
