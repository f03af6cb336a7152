// Runs a hand-written kernel's body on the host, one std::thread per GPU thread, so that tests
// on a machine without a GPU check what the body computes (not how fast): block-shared arrays
// become function statics (one block runs at a time), barriers are real barriers, and a warp's
// (SIMD group's) shuffles exchange through a per-warp buffer. EMULATE_CUDA or EMULATE_METAL
// selects the dialect's spellings. See mod.rs.
#pragma once
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace emu {

struct uint3 {
  unsigned x, y, z;
};

// A barrier for `count` threads that may be reused (a generation counter).
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const unsigned long generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      released_.notify_all();
    } else {
      released_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  int count_;
  int waiting_ = 0;
  unsigned long generation_ = 0;
};

struct Block {
  explicit Block(int threads) : all(threads), exchange((threads + 31) / 32 * 32 * 16) {
    for (int w = 0; w * 32 < threads; ++w) warps.emplace_back(new Barrier(threads - w * 32 < 32 ? threads - w * 32 : 32));
  }
  Barrier all;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<unsigned char> exchange;  // 16 bytes a lane
};

struct Thread {
  uint3 block, thread, block_dim, grid_dim;
  int warp, lane;
  Block* shared;
};
inline thread_local Thread current;

inline void sync_block() { current.shared->all.wait(); }
inline void sync_warp() { current.shared->warps[current.warp]->wait(); }

// Every lane of the warp calls it, as on the GPU.
template <class V>
V shuffle_xor(V value, int offset) {
  static_assert(sizeof(V) <= 16, "a shuffle moves at most 16 bytes");
  unsigned char* lanes = current.shared->exchange.data() + current.warp * 32 * 16;
  std::memcpy(lanes + current.lane * 16, &value, sizeof(V));
  sync_warp();
  V other;
  std::memcpy(&other, lanes + ((current.lane ^ offset) & 31) * 16, sizeof(V));
  sync_warp();
  return other;
}

// Blocks run one after another (their statics are the block's shared memory); a block's
// threads run at once.
template <class Body>
void launch(int blocks, int threads, Body body) {
  for (int b = 0; b < blocks; ++b) {
    Block block(threads);
    std::vector<std::thread> running;
    running.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      running.emplace_back([&, b, t] {
        current = Thread{{unsigned(b), 0, 0}, {unsigned(t), 0, 0}, {unsigned(threads), 1, 1},
                         {unsigned(blocks), 1, 1}, t / 32, t % 32, &block};
        body();
      });
    }
    for (auto& thread : running) thread.join();
  }
}

// float16 and bfloat16 as stored (2 bytes), converted through float32 with round-to-nearest-even.
struct half_t {
  uint16_t bits;
  half_t() = default;
  half_t(float f) {
    const _Float16 h = static_cast<_Float16>(f);
    std::memcpy(&bits, &h, 2);
  }
  operator float() const {
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return static_cast<float>(h);
  }
};

struct bf16_t {
  uint16_t bits;
  bf16_t() = default;
  bf16_t(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bits = std::isnan(f) ? uint16_t(0x7fc0) : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

inline std::vector<unsigned char> read_file(const char* path) {
  std::vector<unsigned char> bytes;
  if (FILE* f = std::fopen(path, "rb")) {
    unsigned char chunk[65536];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
    std::fclose(f);
  } else {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(2);
  }
  return bytes;
}

inline void write_file(const char* path, const std::vector<unsigned char>& bytes) {
  FILE* f = std::fopen(path, "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "cannot write %s\n", path);
    std::exit(2);
  }
  std::fclose(f);
}

}  // namespace emu

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// CUDA's and Metal's min/max take mixed integer operands.
template <class A, class B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  return std::common_type_t<A, B>(a) < std::common_type_t<A, B>(b) ? a : b;
}
template <class A, class B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  return std::common_type_t<A, B>(a) < std::common_type_t<A, B>(b) ? b : a;
}
using std::isnan;
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float rsqrt(float x) { return 1.f / std::sqrt(x); }
// A float passed as its bits in an integer template constant (CUDA and Metal spellings).
template <class To, class From>
To as_type(From from) {
  static_assert(sizeof(To) == sizeof(From), "a bit-cast keeps the size");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
inline float __int_as_float(int bits) { return as_type<float>(bits); }

#if defined(EMULATE_CUDA)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__
#define __syncthreads() emu::sync_block()
#define __syncwarp() emu::sync_warp()
#define __shfl_xor_sync(mask, value, offset) emu::shuffle_xor(value, offset)
#define blockIdx (emu::current.block)
#define threadIdx (emu::current.thread)
#define blockDim (emu::current.block_dim)
#define gridDim (emu::current.grid_dim)
#elif defined(EMULATE_METAL)
#define threadgroup static
#define device
#define constant
#define threadgroup_barrier(flags) emu::sync_block()
#define simdgroup_barrier(flags) emu::sync_warp()
#define simd_shuffle_xor(value, offset) emu::shuffle_xor(value, offset)
#define threadgroup_position_in_grid (emu::current.block)
#define thread_position_in_threadgroup (emu::current.thread)
#define threads_per_threadgroup (emu::current.block_dim)
#define simdgroup_index_in_threadgroup (emu::current.warp)
#define thread_index_in_simdgroup (emu::current.lane)
using ushort = unsigned short;
using uint = unsigned;
#endif
