// Copies between host memory and MLX's CUDA buffers made by the CUDA driver: device-to-host
// copies that leave the buffers on the device, host-to-device copies of large inputs, and
// prefetches of arrays made from host bytes to the device. Included in the mlx-c unity build
// (build/mlx_c.rs), where mlx-c's handle accessors are in scope. Called on MLX's CUDA backend
// only.
//
// Why: reading an array's data through MLX (`array::data()`, mlx-c's `mlx_array_data_*`) moves
// its buffer to unified (managed) memory for good, with its pages on the host. MLX's allocator
// then recycles that buffer for later GPU results, and every kernel that writes into it stalls
// on page faults (150-190 us a kernel on an H200, in an ncu trace of a decode step). A decode
// step reads its logits and its checks every token, so its next step paid those faults.
// Buffers already in unified memory (arrays made from host bytes, and whatever MLX's cache hands
// out after them) are read with the driver's generic copy too: a copy reads the pages where they
// are, while the host touching them would move them back to the host for the next kernel.

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mlx/primitives.h"
#include "mlx/transforms.h"
#include "mlx/version.h"

namespace mlx::core::cu {
class CommandEncoder;
} // namespace mlx::core::cu

namespace mlx_ep {

// What an `allocator::Buffer` points to on MLX's CUDA backend: `cu::CudaBuffer` of MLX 0.32.4
// (mlx/backend/cuda/allocator.h, whose header needs CUDA's). `device` is -1 for unified memory.
struct CudaBufferView {
  void* data;
  size_t size;
  int device;
};

// CUDA's driver API, as MLX's CUDA build links it (libcuda.so.1; its runtime is static, so
// there is no libcudart to ask). Looked up once, in the copy MLX loaded (RTLD_NOLOAD).
struct MemLocation {
  int type; // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};
struct Driver {
  int (*ctx_get_current)(void** ctx) = nullptr;
  int (*ctx_set_current)(void* ctx) = nullptr;
  int (*primary_ctx_retain)(void** ctx, int device) = nullptr;
  int (*memcpy_dtoh)(void* dst, uintptr_t src, size_t bytes) = nullptr;
  int (*memcpy_any)(uintptr_t dst, uintptr_t src, size_t bytes) = nullptr;
  int (*memcpy_async)(uintptr_t dst, uintptr_t src, size_t bytes, void* stream) = nullptr;
  int (*prefetch)(uintptr_t ptr, size_t bytes, MemLocation to, unsigned flags, void* stream) =
      nullptr;
  int (*stream_synchronize)(void* stream) = nullptr;
};

const Driver& driver() {
  static Driver d = []() {
    Driver d;
    if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
      d.ctx_get_current = reinterpret_cast<decltype(d.ctx_get_current)>(dlsym(lib, "cuCtxGetCurrent"));
      d.ctx_set_current = reinterpret_cast<decltype(d.ctx_set_current)>(dlsym(lib, "cuCtxSetCurrent"));
      d.primary_ctx_retain =
          reinterpret_cast<decltype(d.primary_ctx_retain)>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
      d.memcpy_dtoh = reinterpret_cast<decltype(d.memcpy_dtoh)>(dlsym(lib, "cuMemcpyDtoH_v2"));
      d.memcpy_any = reinterpret_cast<decltype(d.memcpy_any)>(dlsym(lib, "cuMemcpy"));
      d.memcpy_async = reinterpret_cast<decltype(d.memcpy_async)>(dlsym(lib, "cuMemcpyAsync"));
      d.prefetch = reinterpret_cast<decltype(d.prefetch)>(dlsym(lib, "cuMemPrefetchAsync_v2"));
      d.stream_synchronize =
          reinterpret_cast<decltype(d.stream_synchronize)>(dlsym(lib, "cuStreamSynchronize"));
    }
    return d;
  }();
  return d;
}

// Makes sure this thread has a CUDA context current: the primary context of GPU 0, the one
// MLX's runtime uses (retained once for the process, as MLX keeps it).
bool context_current(const Driver& d) {
  void* ctx = nullptr;
  if (d.ctx_get_current == nullptr || d.ctx_get_current(&ctx) != 0) {
    return false;
  }
  if (ctx != nullptr) {
    return true;
  }
  static void* primary = [&d]() -> void* {
    void* p = nullptr;
    return d.primary_ctx_retain != nullptr && d.primary_ctx_retain(&p, 0) == 0 ? p : nullptr;
  }();
  return primary != nullptr && d.ctx_set_current != nullptr && d.ctx_set_current(primary) == 0;
}

// Whether this thread can move a unified buffer to the GPU, copy with the driver and wait for the
// legacy stream: what the copies into MLX memory below need.
bool copies_on_device(const Driver& d) {
  return d.memcpy_any != nullptr && d.prefetch != nullptr && d.stream_synchronize != nullptr &&
         context_current(d);
}

// The buffer behind an evaluated array, when the array's bytes lie within it.
const CudaBufferView* buffer_of(const mlx::core::array& arr, size_t bytes) {
  auto* buf = static_cast<const CudaBufferView*>(arr.buffer().ptr());
  if (buf == nullptr || buf->data == nullptr || arr.offset() < 0 ||
      static_cast<size_t>(arr.offset()) > buf->size ||
      bytes > buf->size - static_cast<size_t>(arr.offset())) {
    return nullptr;
  }
  return buf;
}

// MLX's CUDA stream for `s`, where its kernels run, or null when it cannot be had here.
//
// MLX has no public way to it: `cu::get_command_encoder(Stream)` is exported (MLX_API) but its
// header needs CUDA's, and the encoder's `stream()` is inline. So the function is looked up by
// its C++ name in the libmlx that defines `mlx::core::version`, and the stream read where MLX
// 0.32.4 keeps it: `CommandEncoder` starts with `Device& device_` and then `CudaStream stream_`,
// a `CudaHandle` whose one member is the `cudaStream_t` (mlx/backend/cuda/device.h,
// cuda_utils.h).
// That layout is MLX 0.32.4's: another version gets null, and the caller its other route.
void* encoder_stream(const mlx::core::Stream& s) {
  using GetEncoder = mlx::core::cu::CommandEncoder& (*)(mlx::core::Stream);
  static GetEncoder get = []() -> GetEncoder {
    if (std::strcmp(mlx::core::version(), "0.32.4") != 0) {
      return nullptr;
    }
    Dl_info info;
    if (dladdr(reinterpret_cast<const void*>(&mlx::core::version), &info) == 0) {
      return nullptr;
    }
    void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) {
      return nullptr;
    }
    return reinterpret_cast<GetEncoder>(
        dlsym(lib, "_ZN3mlx4core2cu19get_command_encoderENS0_6StreamE"));
  }();
  if (get == nullptr || s.device != mlx::core::Device::gpu) {
    return nullptr;
  }
  auto& encoder = get(s);
  return reinterpret_cast<void* const*>(&encoder)[1];
}

// The stream `mlx_ep_eval_then_copy` queues its copies on, or null when it cannot copy here:
// MLX 0.32.4's CUDA backend, the driver's copy functions, and a CUDA context current.
void* copy_stream(const Driver& d, const mlx::core::Stream& s) {
  if (d.memcpy_async == nullptr || d.stream_synchronize == nullptr || !context_current(d)) {
    return nullptr;
  }
  return encoder_stream(s);
}

} // namespace mlx_ep

// Whether `mlx_ep_eval_then_copy` can copy on stream `s` here: MLX 0.32.4's CUDA backend with
// the driver's copy functions and a CUDA context current. Sets up nothing MLX would not.
extern "C" bool mlx_ep_copies_on_stream(mlx_stream s) {
  try {
    return mlx_ep::copy_stream(mlx_ep::driver(), mlx_stream_get_(s)) != nullptr;
  } catch (...) {
    return false;
  }
}

// Evaluates `arrays`, then copies the bytes of each `srcs[i]` (evaluated by them) to `dsts[i]`
// (`sizes[i]` bytes: host memory, or an MLX buffer), on MLX's CUDA stream behind the
// evaluation's kernels, and waits once for all of it. Why: a result copied after MLX's
// evaluation costs a second round trip to the GPU, and a store kernel evaluated with the run
// costs MLX's host work for one more primitive (12.7 us a run on an H100, measured in direct
// MLX); a copy queued on the stream costs one driver call. Sets
// `copied[i]` to 1 for each copy made, 0 for one the caller must make after (a source of
// another size, or not made on this stream, a failed copy). Returns
// 0 when evaluated; 1 when nothing was done (not MLX 0.32.4's CUDA backend: evaluate the usual
// way); 2 when MLX's evaluation failed (its message through mlx-c's error handler); 3 + CUDA's
// error code when the stream failed.
extern "C" int mlx_ep_eval_then_copy(mlx_vector_array arrays, const mlx_array* srcs,
                                     void* const* dsts, const size_t* sizes, size_t n,
                                     mlx_stream s, int* copied) {
  const auto& d = mlx_ep::driver();
  void* stream = nullptr;
  try {
    stream = mlx_ep::copy_stream(d, mlx_stream_get_(s));
    if (stream == nullptr) {
      return 1;
    }
  } catch (...) {
    return 1;
  }
  // A copy queued on `s` follows only what `s` computes: a source made on another stream (or
  // still being made there) is copied after the evaluation instead.
  const auto& stream_of_run = mlx_stream_get_(s);
  std::vector<bool> ordered(n, false);
  try {
    for (size_t i = 0; i < n; ++i) {
      const auto& src = mlx_array_get_(srcs[i]);
      ordered[i] = src.has_primitive() ? src.primitive().stream() == stream_of_run
                                       : src.is_available();
    }
    // Leaves every kernel of the evaluation committed to the stream (MLX's `eval` is this, then
    // a wait on the outputs' event).
    mlx::core::async_eval(mlx_vector_array_get_(arrays));
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 2;
  }
  // A source that came out strided (a transposed view, a channels-last cluster's NCHW edge) is
  // made row-major by one more MLX copy on the same stream, queued behind the rest: what the
  // store kernel's input paid too, and still one wait.
  auto dense = [](const mlx::core::array& a) {
    return a.flags().row_contiguous && a.data_size() == a.size();
  };
  std::vector<mlx::core::array> made;
  std::vector<size_t> made_for(n, n);
  try {
    for (size_t i = 0; i < n; ++i) {
      const auto& src = mlx_array_get_(srcs[i]);
      if (ordered[i] && !dense(src)) {
        made_for[i] = made.size();
        made.push_back(mlx::core::contiguous(src, false, stream_of_run));
      }
    }
    if (!made.empty()) {
      mlx::core::async_eval(made);
    }
  } catch (...) {
    // Left to the copy after the evaluation.
    for (size_t i = 0; i < n; ++i) {
      ordered[i] = ordered[i] && made_for[i] == n;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    copied[i] = 0;
    try {
      const auto& src = made_for[i] < made.size() ? made[made_for[i]] : mlx_array_get_(srcs[i]);
      if (!ordered[i] || dsts[i] == nullptr || sizes[i] == 0 || src.nbytes() != sizes[i] ||
          !dense(src)) {
        continue;
      }
      const auto* from = mlx_ep::buffer_of(src, sizes[i]);
      if (from == nullptr) {
        continue;
      }
      auto at = reinterpret_cast<uintptr_t>(from->data) + static_cast<uintptr_t>(src.offset());
      copied[i] =
          d.memcpy_async(reinterpret_cast<uintptr_t>(dsts[i]), at, sizes[i], stream) == 0 ? 1 : 0;
    } catch (...) {
    }
  }
  int status = d.stream_synchronize(stream);
  return status == 0 ? 0 : 3 + status;
}

// Copies `bytes` bytes of the evaluated, finished, row-contiguous array `a` into host memory
// `dst` with the driver, wherever its buffer lives: device memory by a device-to-host copy,
// unified memory by the generic copy (which leaves its pages where they are). Only for MLX's
// CUDA backend (the caller checks). Returns 0 when copied; 1 when the driver cannot do it (no
// copy function, no CUDA context current here, or a unified buffer it would not copy): the
// caller then reads the array through MLX; 2 + CUDA's error code when a device copy failed.
extern "C" int mlx_ep_copy_from_device(mlx_array a, void* dst, size_t bytes) {
  try {
    auto& arr = mlx_array_get_(a);
    const auto* buf = mlx_ep::buffer_of(arr, bytes);
    const auto& d = mlx_ep::driver();
    if (buf == nullptr || !mlx_ep::context_current(d)) {
      return 1;
    }
    auto src = reinterpret_cast<uintptr_t>(buf->data) + static_cast<uintptr_t>(arr.offset());
    if (buf->device < 0) {
      bool copied = d.memcpy_any != nullptr &&
                    d.memcpy_any(reinterpret_cast<uintptr_t>(dst), src, bytes) == 0;
      return copied ? 0 : 1;
    }
    if (d.memcpy_dtoh == nullptr) {
      return 1;
    }
    int status = d.memcpy_dtoh(dst, src, bytes);
    return status == 0 ? 0 : 2 + status;
  } catch (...) {
    return 1;
  }
}

// Starts moving the unified-memory buffer of the evaluated array `a` (MLX's CUDA backend puts
// arrays made from host bytes there) to GPU `device`, so that the first kernel to read it does
// not stall on page faults. A hint: nothing waits for it, a failure changes nothing, and an
// array not evaluated yet (no buffer) is left alone.
extern "C" void mlx_ep_prefetch_to_device(mlx_array a, int device) {
  try {
    auto& arr = mlx_array_get_(a);
    if (!arr.is_available()) {
      return;
    }
    const auto* buf = mlx_ep::buffer_of(arr, arr.nbytes());
    const auto& d = mlx_ep::driver();
    if (buf == nullptr || buf->device >= 0 || d.prefetch == nullptr || !mlx_ep::context_current(d)) {
      return;
    }
    d.prefetch(reinterpret_cast<uintptr_t>(buf->data), buf->size, mlx_ep::MemLocation{1, device}, 0,
               nullptr);
  } catch (...) {
  }
}

// Makes `*out` an array of `bytes` bytes copied from host memory `src` by the driver: a buffer
// of MLX's allocator (unified memory) is first moved to GPU `device`, untouched by the host, then
// filled by one driver copy, which is finished before this returns (the legacy stream is
// synchronised: a copy from pageable memory may return before its DMA ends). Why: MLX makes an
// array from host bytes by writing them into fresh unified memory from the host, page by page
// (1.3-2.2 GB/s measured on an H200, most of a CNN's run at batch 16). Returns 0 when made; 1
// when the driver cannot do it here (the caller then makes the array through MLX).
extern "C" int mlx_ep_array_from_host_by_driver(mlx_array* out, const void* src, size_t bytes,
                                                const int* shape, int ndim, mlx_dtype dtype,
                                                int device) {
  try {
    const auto& d = mlx_ep::driver();
    if (bytes == 0 || !mlx_ep::copies_on_device(d)) {
      return 1;
    }
    auto data = mlx::core::allocator::malloc(bytes);
    auto* buf = static_cast<const mlx_ep::CudaBufferView*>(data.buffer().ptr());
    if (buf == nullptr || buf->data == nullptr || buf->size < bytes) {
      return 1;
    }
    auto dst = reinterpret_cast<uintptr_t>(buf->data);
    if (buf->device < 0 &&
        d.prefetch(dst, bytes, mlx_ep::MemLocation{1, device}, 0, nullptr) != 0) {
      return 1;
    }
    if (d.memcpy_any(dst, reinterpret_cast<uintptr_t>(src), bytes) != 0 ||
        d.stream_synchronize(nullptr) != 0) {
      return 1;
    }
    mlx::core::Shape dims(shape, shape + ndim);
    mlx_array_set_(*out, mlx::core::array(std::move(data), std::move(dims), mlx_dtype_to_cpp(dtype)));
    return 0;
  } catch (...) {
    return 1;
  }
}

// Copies `bytes` bytes of the evaluated, finished, row-contiguous array `a` into `dst`, the
// start of an MLX unified-memory buffer (an output a user bound in the EP's memory): `dst` is
// first moved to GPU `device`, so the copy stays on the device instead of pulling its pages to
// the host (which a device-to-host copy would, and the next kernel to write them would fault
// them back). Synchronises the legacy stream: a device-to-device copy returns before it ends.
// Returns 0 when copied; 1 when the driver cannot (read through MLX instead); 2 + CUDA's error.
extern "C" int mlx_ep_copy_into_unified(mlx_array a, void* dst, size_t bytes, int device) {
  try {
    auto& arr = mlx_array_get_(a);
    const auto* buf = mlx_ep::buffer_of(arr, bytes);
    const auto& d = mlx_ep::driver();
    if (buf == nullptr || !mlx_ep::copies_on_device(d)) {
      return 1;
    }
    auto to = reinterpret_cast<uintptr_t>(dst);
    if (d.prefetch(to, bytes, mlx_ep::MemLocation{1, device}, 0, nullptr) != 0) {
      return 1;
    }
    auto src = reinterpret_cast<uintptr_t>(buf->data) + static_cast<uintptr_t>(arr.offset());
    int status = d.memcpy_any(to, src, bytes);
    if (status == 0) {
      status = d.stream_synchronize(nullptr);
    }
    return status == 0 ? 0 : 2 + status;
  } catch (...) {
    return 1;
  }
}
