// Metal twin of per_row.cu (see there): the same opening, after a row loader that defines
// load_into(dst, at) (row_of_x.metal, layer_norm/row_of_sum.metal) and before the body
// (rms_norm.metal, layer_norm.metal). Metal has no lambdas: the loader and the block sum are
// function-like macros.
constexpr int PER = (H + THREADS - 1) / THREADS;
constexpr int WARPS = THREADS / 32;
threadgroup float partial[WARPS];
const size_t row = threadgroup_position_in_grid.x;
const int tid = int(thread_position_in_threadgroup.x);
// block_sum(value, total): the sum of `value` over the threadgroup into `total`, in every
// thread: SIMD-group shuffles, then one SIMD group over the groups' sums. It ends with a
// barrier, so `partial` may be written again after it.
#define block_sum(value, total)                                                      \
  {                                                                                  \
    float part_ = (value);                                                           \
    for (int offset = 16; offset > 0; offset /= 2) {                                 \
      part_ += simd_shuffle_xor(part_, ushort(offset));                              \
    }                                                                                \
    if (tid % 32 == 0) partial[tid / 32] = part_;                                    \
    threadgroup_barrier(mem_flags::mem_threadgroup);                                 \
    if (tid < 32) {                                                                  \
      float all_ = tid < WARPS ? partial[tid] : 0.f;                                 \
      for (int offset = 16; offset > 0; offset /= 2) {                               \
        all_ += simd_shuffle_xor(all_, ushort(offset));                              \
      }                                                                              \
      if (tid == 0) partial[0] = all_;                                               \
    }                                                                                \
    threadgroup_barrier(mem_flags::mem_threadgroup);                                 \
    total = partial[0];                                                              \
    threadgroup_barrier(mem_flags::mem_threadgroup);                                 \
  }
float v[PER];
for (int k = 0; k < PER; ++k) {
  const int at = tid + k * THREADS;
  v[k] = 0.f;
  if (at < H) load_into(v[k], at);
}
