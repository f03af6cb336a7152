// Metal twin of row_of_x.cu: how per_row.metal reads an element `at` of the threadgroup's row.
#define load_into(dst, at) dst = static_cast<float>(x[row * H + (at)])
