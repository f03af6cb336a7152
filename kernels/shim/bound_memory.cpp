// Memory that ORT allocates through the EP's allocator (tensors a user places in the EP's
// memory, for IO binding): buffers of MLX's own allocator, so that an input there becomes an
// MLX array without a copy. Included in the mlx-c unity build (build/mlx_c.rs), where mlx-c's
// handle helpers are in scope.
//
// Why not mlx-c: `mlx_array_new_data_managed` copies foreign bytes on MLX's CPU and CUDA
// backends (only Metal's allocator adopts them), and mlx-c cannot make an array over a buffer
// MLX allocated. MLX's allocator hands out host-visible memory (the CPU backend's heap, CUDA's
// unified memory, Metal's shared storage), which is what HOST_ACCESSIBLE memory promises ORT.

#include <cstddef>

// Allocates `bytes` bytes (at least one) from MLX's allocator. Returns the buffer's handle
// (MLX's `Buffer::ptr()`, what `mlx_ep_buffer_free` and `mlx_ep_array_over_buffer` take) and
// sets `*data` to its host-visible address; null when MLX cannot allocate.
extern "C" void* mlx_ep_buffer_malloc(size_t bytes, void** data) {
  try {
    auto buffer = mlx::core::allocator::allocator().malloc(bytes == 0 ? 1 : bytes);
    if (buffer.ptr() == nullptr) {
      return nullptr;
    }
    *data = buffer.raw_ptr();
    if (*data == nullptr) {
      mlx::core::allocator::allocator().free(buffer);
      return nullptr;
    }
    return buffer.ptr();
  } catch (...) {
    return nullptr;
  }
}

// Returns a buffer from `mlx_ep_buffer_malloc` to MLX's allocator (which may keep it cached).
extern "C" void mlx_ep_buffer_free(void* buffer) {
  try {
    mlx::core::allocator::allocator().free(mlx::core::allocator::Buffer(buffer));
  } catch (...) {
  }
}

// Makes `*out` an evaluated array whose data is the start of `buffer`, with no copy. The array
// does not own the buffer (its deleter does nothing): ORT frees it through the allocator, so the
// caller keeps the array no longer than ORT keeps the tensor. Returns 0, or 1 on failure (with
// MLX's message reported through mlx-c's error handler).
extern "C" int mlx_ep_array_over_buffer(mlx_array* out, void* buffer, const int* shape, int ndim,
                                        mlx_dtype dtype) {
  try {
    mlx::core::Shape dims(shape, shape + ndim);
    mlx::core::allocator::Data data(mlx::core::allocator::Buffer(buffer),
                                    [](mlx::core::allocator::Buffer) {});
    mlx_array_set_(*out, mlx::core::array(std::move(data), std::move(dims),
                                          mlx_dtype_to_cpp(dtype)));
    return 0;
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 1;
  }
}
