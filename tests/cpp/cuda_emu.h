// cuda_emu.h: just enough of CUDA to run the kernels of cpp/kernels/cuda/*.cuh on the CPU, for
// tests on machines without a GPU (tests/test_cuda_emulated*.py). Included by common.cuh when
// TRT_SPEC_CUDA_EMU is defined; C++17, built by CMake's test targets (TRT_SPEC_BUILD_TESTS).
//
// A launch runs its blocks one after another; each block runs blockDim.x threads as fibers on
// the launching thread (below). Shared memory is a function-static variable (one block at a
// time: the same semantics), __syncthreads is a barrier over the block, and warp shuffles /
// ballots exchange values through a per-warp buffer between two barriers of the warp's 32
// threads. Every warp-level primitive must
// therefore be reached by all 32 lanes of the warp, which the kernels guarantee anyway (they are
// called with the full mask). Atomics are GCC atomics. Float results differ from a GPU in the
// last bits (host libm, no fused intrinsics); token choices and indexing are what this checks.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __grid_constant__

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
  float x, y, z, w;
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct uint2 {
  uint32_t x, y;
};
using cudaStream_t = void*;

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

// CUDA's integer min / max for device code.
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}

namespace cuda_emu {

// A block's threads are fibers on the launching OS thread (ucontext): each runs until it waits
// at a barrier (of the block, or of its warp for shuffles, ballots and __syncwarp), then hands
// over to the next unfinished thread in thread order. No OS threads, locks or wake-ups: a
// barrier of 128 threads costs 128 user-space switches.
constexpr size_t kFiberStack = 256 * 1024;  // bytes of stack per thread (mapped lazily)

struct Block;
inline thread_local Block* tl_block = nullptr;

// A reusable barrier of n threads: the last to arrive starts the next generation; the others
// hand over until it has.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  inline void arrive_and_wait();

 private:
  const int n_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

struct Warp {
  Barrier bar{32};
  uint64_t slot[32];
};

struct Fiber {
  ucontext_t ctx;
  bool done = false;
};

struct Block {
  Block(int threads, const std::function<void()>& body) : bar(threads), body(body) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
    fibers.resize(threads);
    live = threads;
  }
  Barrier bar;
  std::vector<std::unique_ptr<Warp>> warps;
  const std::function<void()>& body;
  std::vector<Fiber> fibers;
  ucontext_t main;
  int current = 0;
  int live = 0;

  // Switches to the next unfinished thread after the current one (the current one included
  // last: a thread alone at a barrier would wait forever, which is a kernel bug).
  void yield() {
    const int n = static_cast<int>(fibers.size());
    int next = current;
    do {
      next = (next + 1) % n;
    } while (fibers[next].done && next != current);
    if (next == current) {
      std::fprintf(stderr, "cuda_emu: thread %d waits at a barrier no other thread reaches\n",
                   current);
      std::abort();
    }
    const int prev = current;
    current = next;
    threadIdx = dim3(static_cast<unsigned>(next));
    swapcontext(&fibers[prev].ctx, &fibers[next].ctx);
  }

  static void entry() {
    Block* b = tl_block;
    b->body();
    b->fibers[b->current].done = true;
    if (--b->live == 0) {
      setcontext(&b->main);
    }
    b->yield();  // (never comes back: this fiber is done)
  }
};

inline void Barrier::arrive_and_wait() {
  const uint64_t gen = gen_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++gen_;
    return;
  }
  while (gen_ == gen) tl_block->yield();
}

inline int lane() {
  return static_cast<int>(threadIdx.x & 31);
}

template <class T>
uint64_t to_bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Every lane publishes v; returns the value of lane src (its own when src is out of range).
template <class T>
T exchange(T v, int src) {
  Warp& w = *tl_block->warps[threadIdx.x / 32];
  w.slot[lane()] = to_bits(v);
  w.bar.arrive_and_wait();
  const T r = (src >= 0 && src < 32) ? from_bits<T>(w.slot[src]) : v;
  w.bar.arrive_and_wait();
  return r;
}

// Stacks for `threads` fibers, reused by every block of a launch.
class Stacks {
 public:
  explicit Stacks(int threads) : bytes_(kFiberStack * static_cast<size_t>(threads)) {
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) {
      std::perror("cuda_emu: mmap of fiber stacks");
      std::abort();
    }
  }
  ~Stacks() { munmap(base_, bytes_); }
  void* at(int t) const { return static_cast<char*>(base_) + kFiberStack * t; }

 private:
  size_t bytes_;
  void* base_;
};

// Runs kernel(args...) over grid x block threads, block by block.
template <class Kernel, class... Args>
void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  const int threads = static_cast<int>(block.x);
  Stacks stacks(threads);
  const std::function<void()> body = [&] { kernel(args...); };
  Block* const outer = tl_block;
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block blk(threads, body);
      blockIdx = dim3(bx, by);
      blockDim = block;
      gridDim = grid;
      tl_block = &blk;
      for (int t = 0; t < threads; ++t) {
        ucontext_t& c = blk.fibers[t].ctx;
        getcontext(&c);
        c.uc_stack.ss_sp = stacks.at(t);
        c.uc_stack.ss_size = kFiberStack;
        c.uc_link = nullptr;
        makecontext(&c, &Block::entry, 0);
      }
      threadIdx = dim3(0);
      swapcontext(&blk.main, &blk.fibers[0].ctx);
    }
  }
  tl_block = outer;
}

// Observers of what a kernel asks of memory (tests; null: nobody listens): the L2 prefetches of
// l2_prefetch.cuh and the weight units matmul_fetch loads, as (address, bytes).
inline thread_local void (*on_prefetch)(const void* p, size_t n) = nullptr;
inline thread_local void (*on_weight_read)(const void* p, size_t n) = nullptr;
inline void note_prefetch(const void* p, size_t n) {
  if (on_prefetch) on_prefetch(p, n);
}
inline void note_weight_read(const void* p, size_t n) {
  if (on_weight_read) on_weight_read(p, n);
}

}  // namespace cuda_emu

inline void __syncthreads() {
  cuda_emu::tl_block->bar.arrive_and_wait();
}

template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return cuda_emu::exchange(v, cuda_emu::lane() ^ mask);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d) {
  return cuda_emu::exchange(v, cuda_emu::lane() - static_cast<int>(d));
}
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return cuda_emu::exchange(v, src);
}
inline unsigned __ballot_sync(unsigned, bool pred) {
  cuda_emu::Warp& w = *cuda_emu::tl_block->warps[threadIdx.x / 32];
  w.slot[cuda_emu::lane()] = pred ? 1 : 0;
  w.bar.arrive_and_wait();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) m |= static_cast<unsigned>(w.slot[l] != 0) << l;
  w.bar.arrive_and_wait();
  return m;
}

template <class T>
T atomicAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

template <class T>
T __ldg(const T* p) {
  return *p;
}
inline int __ffs(unsigned x) {
  return __builtin_ffs(static_cast<int>(x));
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline unsigned long long __float2ull_rn(float x) {
  return static_cast<unsigned long long>(std::nearbyint(static_cast<double>(x)));
}
inline uint32_t __float_as_uint(float f) {
  return cuda_emu::from_bits<uint32_t>(cuda_emu::to_bits(f));
}
inline float __uint_as_float(uint32_t u) {
  return cuda_emu::from_bits<float>(cuda_emu::to_bits(u));
}

// Half precision: bits only (exact conversion, as __half2float).
struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(unsigned short h) {
  return __half{h};
}
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1f, mant = h.bits & 0x3ff;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}

// ---- intrinsics of the fused matmul (cpp/kernels/cuda/matmul.cuh) --------------------------

// c + the dot product of the 4 signed bytes of a and b.
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k)
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k)));
  return c;
}
// Round to nearest, ties to even (the default rounding mode).
inline int __float2int_rn(float x) {
  return static_cast<int>(std::nearbyint(x));
}
// ---- attention (kernels/cuda/attention.cuh) ---------------------------------------------------
// __syncwarp: a barrier of the warp's 32 threads. __threadfence: blocks run one after another, so
// a full fence is enough. __ldcg: a plain load.
inline void __syncwarp(unsigned = 0xffffffffu) {
  cuda_emu::tl_block->warps[threadIdx.x / 32]->bar.arrive_and_wait();
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
template <class T>
T __ldcg(const T* p) {
  return *p;
}

// ---- WMMA (kernels/cuda/matmul_imma.cuh): the int8 16 x 16 x 16 tiles ----------------------
// Every lane holds the whole tile (the layout across lanes is opaque to the kernels, which only
// load, multiply and store fragments); mma_sync computes exact int32 sums. store_matrix_sync:
// lane 0 writes the tile, then the warp's barrier (the kernels __syncwarp before reading it).
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  T x[kRows][kCols];  // logical (row, column) of the tile: A (m, k), B (k, n), C (m, n)
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
  for (auto& row : f.x)
    for (auto& e : row) e = v;
}

template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::kRows; ++r)
    for (int c = 0; c < F::kCols; ++c)
      f.x[r][c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
}

template <int M, int N, int K, class TA, class TB, class TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d,
              const fragment<matrix_a, M, N, K, TA, row_major>& a,
              const fragment<matrix_b, M, N, K, TB, col_major>& b,
              const fragment<accumulator, M, N, K, TC>& c) {
  fragment<accumulator, M, N, K, TC> r;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      TC s = c.x[i][j];
      for (int k = 0; k < K; ++k) s += static_cast<TC>(a.x[i][k]) * static_cast<TC>(b.x[k][j]);
      r.x[i][j] = s;
    }
  d = r;
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout) {
  if (cuda_emu::lane() == 0)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        (layout == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.x[i][j];
  __syncwarp();
}
}  // namespace nvcuda::wmma
