// Body of the in-place store (MLX's custom-kernel primitive wraps it in a __global__ function
// whose parameters are src, dst, dst_shape and the one-byte output out, never written). See
// store_bytes/mod.rs.
//
// `dst` is an array over memory MLX does not own (an output ORT bound in the EP's memory):
// declared an input so that MLX orders the store after `src` is computed, written through a
// cast because it is the destination. Each thread stores one 16-byte unit; the last, partial
// unit, and buffers not 16-byte aligned (a row-contiguous view can start anywhere), go byte by
// byte.
const unsigned long long bytes = static_cast<unsigned long long>(dst_shape[0]);
const unsigned long long at =
    (static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 16ull;
if (at >= bytes) return;
const unsigned char* from = reinterpret_cast<const unsigned char*>(src);
unsigned char* to = const_cast<unsigned char*>(dst);
const bool aligned =
    ((reinterpret_cast<unsigned long long>(from) | reinterpret_cast<unsigned long long>(to)) & 15ull) == 0;
if (aligned && at + 16ull <= bytes) {
  *reinterpret_cast<uint4*>(to + at) = *reinterpret_cast<const uint4*>(from + at);
} else {
  for (unsigned long long i = at; i < bytes && i < at + 16ull; ++i) {
    to[i] = from[i];
  }
}
