// The hand-written CUDA kernels as binaries the EP builds and keeps on disk: NVRTC, as MLX's CUDA
// build links it, to compile a whole kernel source to a cubin, and MLX's
// `fast::precompiled_cuda_kernel` to run one. Included in the mlx-c unity build
// (build/mlx_c.rs), where mlx-c's handle helpers are in scope.
//
// Why: MLX's `fast::cuda_kernel` compiles a body with NVRTC in every process and, unlike its
// fused kernels, never writes the result to its disk cache (MLX 0.32), so each process paid
// 2-3 s per kernel variant before its first run. mlx-c binds neither NVRTC nor the precompiled
// primitive.

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace mlx_ep {

// NVRTC's C API, as much of it as a compile needs (nvrtc.h: results are an enum, 0 success; a
// program is an opaque pointer). Looked up once in the copy MLX's CUDA build loaded
// (RTLD_NOLOAD): no NVRTC is loaded on the CPU and Metal backends, and then none is found.
struct Nvrtc {
  using Program = void*;
  const char* (*error_string)(int) = nullptr;
  int (*version)(int*, int*) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*,
                const char* const*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;

  bool found() const {
    return error_string && version && create && destroy && compile && log_size && log &&
           cubin_size && cubin;
  }
};

const Nvrtc& nvrtc() {
  static Nvrtc n = []() {
    Nvrtc n;
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12"}) {
      void* lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
      if (lib == nullptr) {
        continue;
      }
      auto get = [lib](auto& f, const char* symbol) {
        f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, symbol));
      };
      get(n.error_string, "nvrtcGetErrorString");
      get(n.version, "nvrtcVersion");
      get(n.create, "nvrtcCreateProgram");
      get(n.destroy, "nvrtcDestroyProgram");
      get(n.compile, "nvrtcCompileProgram");
      get(n.log_size, "nvrtcGetProgramLogSize");
      get(n.log, "nvrtcGetProgramLog");
      get(n.cubin_size, "nvrtcGetCUBINSize");
      get(n.cubin, "nvrtcGetCUBIN");
      break;
    }
    return n;
  }();
  return n;
}

// A malloc'ed copy of `text` for the Rust side to free with `mlx_ep_free_text`.
char* copied(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, text.c_str(), text.size() + 1);
  }
  return out;
}

// The path of the shared library holding `symbol` (malloc'ed), or null.
char* library_path(const void* symbol) {
  Dl_info info;
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) {
    return nullptr;
  }
  return copied(info.dli_fname);
}

} // namespace mlx_ep

// NVRTC's version, when MLX's CUDA build loaded it: 0 and the version, or 1.
extern "C" int mlx_ep_nvrtc_version(int* major, int* minor) {
  const auto& n = mlx_ep::nvrtc();
  return n.found() && n.version(major, minor) == 0 ? 0 : 1;
}

// Compiles the CUDA source `source` (named `file_name` in messages) with `options` into a cubin.
// Returns 0 with `*binary` (malloc'ed, `*size` bytes) set, or 1 with `*message` (malloc'ed,
// NUL-terminated: NVRTC's error and its log) set.
extern "C" int mlx_ep_nvrtc_compile(const char* source, const char* file_name,
                                    const char* const* options, int option_count, char** binary,
                                    size_t* size, char** message) {
  *binary = nullptr;
  *message = nullptr;
  const auto& n = mlx_ep::nvrtc();
  if (!n.found()) {
    *message = mlx_ep::copied("NVRTC is not loaded (not MLX's CUDA backend)");
    return 1;
  }
  mlx_ep::Nvrtc::Program program = nullptr;
  int status = n.create(&program, source, file_name, 0, nullptr, nullptr);
  if (status != 0) {
    *message = mlx_ep::copied(std::string("nvrtcCreateProgram: ") + n.error_string(status));
    return 1;
  }
  std::string failure;
  status = n.compile(program, option_count, options);
  if (status != 0) {
    size_t log_size = 0;
    std::string log;
    if (n.log_size(program, &log_size) == 0 && log_size > 1) {
      log.resize(log_size);
      if (n.log(program, log.data()) != 0) {
        log.clear();
      }
      log.resize(std::strlen(log.c_str()));
    }
    failure = std::string("nvrtcCompileProgram: ") + n.error_string(status) + "\n" + log;
  } else if (n.cubin_size(program, size) != 0 || *size == 0) {
    failure = "nvrtcGetCUBINSize failed (an architecture without SASS?)";
  } else {
    *binary = static_cast<char*>(std::malloc(*size));
    if (*binary == nullptr || n.cubin(program, *binary) != 0) {
      std::free(*binary);
      *binary = nullptr;
      failure = "nvrtcGetCUBIN failed";
    }
  }
  n.destroy(&program);
  if (!failure.empty()) {
    *message = mlx_ep::copied(failure);
    return 1;
  }
  return 0;
}

// Frees what `mlx_ep_nvrtc_compile` or `mlx_ep_mlx_library_path` returned.
extern "C" void mlx_ep_free_text(char* text) {
  std::free(text);
}

// The paths of the MLX library this process runs and of the NVRTC it loaded (malloc'ed, or
// null): the CUDA headers a kernel needs are found beside them, as MLX's own JIT finds them.
extern "C" char* mlx_ep_mlx_library_path() {
  return mlx_ep::library_path(
      reinterpret_cast<const void*>(&mlx::core::fast::precompiled_cuda_kernel));
}

extern "C" char* mlx_ep_nvrtc_library_path() {
  return mlx_ep::library_path(reinterpret_cast<const void*>(mlx_ep::nvrtc().version));
}

// Applies the cubin `binary` (`size` bytes) whose `extern "C"` kernel is `name` to `inputs`
// (made row-contiguous first), on `stream`: `grid` threads along x in blocks of `threads`, the
// integer `scalars` after the arrays, outputs of the given shapes (`ndims[i]` dimensions each,
// one after another in `shapes`) and types. Sets `*res` to the outputs; 0, or 1 with MLX's
// message reported through mlx-c's error handler.
extern "C" int mlx_ep_precompiled_cuda_kernel_apply(
    mlx_vector_array* res, const char* name, const char* binary, size_t size,
    const mlx_vector_array inputs, const int* shapes, const int* ndims, const mlx_dtype* dtypes,
    size_t output_count, const int* scalars, size_t scalar_count, int grid, int threads,
    const mlx_stream stream) {
  try {
    std::vector<mlx::core::Shape> output_shapes;
    std::vector<mlx::core::Dtype> output_dtypes;
    for (size_t i = 0; i < output_count; ++i) {
      output_shapes.emplace_back(shapes, shapes + ndims[i]);
      shapes += ndims[i];
      output_dtypes.push_back(mlx_dtype_to_cpp(dtypes[i]));
    }
    std::vector<mlx::core::fast::ScalarArg> scalar_args(scalars, scalars + scalar_count);
    mlx_vector_array_set_(
        *res, mlx::core::fast::precompiled_cuda_kernel(
                  name, std::string(binary, size), mlx_vector_array_get_(inputs),
                  output_shapes, output_dtypes, scalar_args, std::make_tuple(grid, 1, 1),
                  std::make_tuple(threads, 1, 1), 0, std::nullopt, true,
                  mlx_stream_get_(stream)));
    return 0;
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 1;
  }
}
