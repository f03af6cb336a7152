// How per_row.cu reads an element `at` of the block's row, for a norm of x itself.
auto load = [&](int at) { return static_cast<float>(x[blockIdx.x * static_cast<size_t>(H) + at]); };
