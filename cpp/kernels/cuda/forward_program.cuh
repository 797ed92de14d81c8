// forward_program.cuh: a whole forward (embed, every layer's matmuls and attention, the head) as
// ONE persistent kernel launch running a list of instructions.
//
// An instruction is one block of one of the per-operation launches the forward would make (a
// matmul block (bx, by), an attention block bx, one row of the embedding or of a row gather): the
// same device code (matmul_block, attention_block), the same plan arithmetic (plan_matmul,
// plan_attention), so every row keeps the bits of the per-operation path. Kernel boundaries are
// replaced by counters: each instruction adds 1 to its counters when done, and waits, after
// its weight prefetch (matmul_block's first fetches) and before it reads anything, for the
// counters it depends on to reach their targets (release: __threadfence then atomicAdd; acquire:
// ld.acquire.gpu then a block barrier and a fence). The last instruction waits for every op and
// zeroes the counters, so the program can be launched again (graph replays).
//
// Scheduling: the grid is exactly the resident blocks (non-cooperative, so it can live in a CUDA
// graph); block b runs instructions b, b + grid, b + 2 grid, .. in order. No deadlock when every
// wait points earlier in the global order (a wait on counter c for target t has at least t
// signallers of c before it) and every block is resident: the earliest unfinished instruction
// then has all its inputs and its block is at it (check_forward_program proves the first; the
// grid the second). Which instruction waits for what: forward_build.cuh.
//
// Weights ahead of the chain (FwdProgramView::prefetch > 0): before each instruction a block
// asks L2 for its NEXT instruction's weights (matmul_prefetch), so DRAM streams the op after
// the current one while the block waits for and runs the current one.
//
// Non-template kernels of the headers included here are static: this header's translation unit
// (cuda_forward.cu) holds its own copies of the kernels other units launch.
//
// Here: the program's types, its ops (fwd_*_op, as their launches take them) and the device side:
// persistent_forward_kernel<kTile> (kTile = fwd_tile(n): 1 for one
// row, 8 for 2 to 16; a row's bits do not depend on the tile) and forward_instruction_kernel (one
// instruction, for the emulation's adversarial orders: tests/cpp/emu_forward.cpp). Compiled for
// sm_90 and later (the body is empty for earlier devices, where the backend never launches it).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_plan.cuh"
#include "kernels/cuda/matmul_kernel.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace trt_spec::cuda {

enum class FwdKind : int32_t { kEmbed = 0, kGather = 1, kMatmul = 2, kAttention = 3, kReset = 4 };

// One op of the forward with everything its launch would take. Instructions: grid_x * grid_y.
struct FwdOp {
  FwdKind kind = FwdKind::kReset;
  int64_t grid_x = 1;
  int32_t grid_y = 1;
  // kMatmul: the product, its plan's geometry and split scratch.
  MatmulArgs mm{};
  MatmulGeom geom{};
  float* partial = nullptr;
  int* mm_counters = nullptr;
  // kAttention: attention_block's arguments and head_dim class (plan_attention's).
  AttnArgs att{};
  int hd_class = 0;
  // kEmbed: out [n, table.cols] = table rows tokens[i]. kGather: out [n, dim] = src rows
  // src_rows[i].
  DevWeight table{};
  const int32_t* tokens = nullptr;
  const float* src = nullptr;
  const int32_t* src_rows = nullptr;
  int dim = 0;
  float* out = nullptr;
};

struct FwdInstr {
  int32_t op = 0;
  int32_t by = 0;
  int64_t bx = 0;
  int32_t wait_begin = 0, wait_count = 0;  // waits [wait_begin, + wait_count)
  int32_t signal[2] = {-1, -1};            // the counters it adds 1 to when done (-1: none)
};

struct FwdWait {
  int32_t counter = 0;
  int32_t target = 0;  // done when counters[counter] >= target
  bool operator==(const FwdWait& o) const { return counter == o.counter && target == o.target; }
};

// A program in device memory (what the kernel reads).
struct FwdProgramView {
  const FwdOp* ops = nullptr;
  const FwdInstr* instrs = nullptr;
  const FwdWait* waits = nullptr;
  int* counters = nullptr;  // [n_counters], zero between launches
  int n_instrs = 0;
  int n_counters = 0;
  // > 0: before each instruction a block streams that many bytes (at most) of its NEXT
  // instruction's weights toward L2 (matmul_prefetch), and at its first that one's too.
  int prefetch = 0;
};

// ---- host: the ops ---------------------------------------------------------------------------

// A fused matmul planned by plan_matmul (a vectorized, non-imma plan: the persistent kernel runs
// matmul_block only) with its split scratch.
inline FwdOp fwd_matmul_op(const MatmulArgs& a, const MatmulPlan& p, float* partial,
                           int* counters) {
  if (!fwd_holds_matmul(a.W.type, p))
    throw std::invalid_argument("persistent forward: a matmul it does not run");
  FwdOp op;
  op.kind = FwdKind::kMatmul;
  op.grid_x = p.grid.x;
  op.grid_y = static_cast<int32_t>(p.grid.y);
  op.mm = a;
  op.geom = p.geom;
  op.partial = partial;
  op.mm_counters = counters;
  return op;
}

// Whether the persistent kernel runs this attention (head_dim up to 128: every model it serves).
inline bool fwd_holds_attention(const AttentionPlan& p) {
  return p.hd_class <= 128;
}

// attention_block over plan p (plan_attention of the same n) and its split scratch.
inline FwdOp fwd_attention_op(const AttentionPlan& p, const float* qkv, RowsView rows, int n,
                              int n_heads, float scale, KvView kv, int layer, float* out,
                              float* partial, unsigned* counters) {
  if (!fwd_holds_attention(p)) throw std::invalid_argument("persistent forward: head_dim over 128");
  FwdOp op;
  op.kind = FwdKind::kAttention;
  op.grid_x = p.grid.x;
  op.att = attention_args(p, qkv, rows, n, n_heads, scale, kv, layer, out, partial, counters);
  op.hd_class = p.hd_class;
  return op;
}

// out [n, table.cols] = table rows tokens[i] (zeros for ids outside it).
inline FwdOp fwd_embed_op(const DevWeight& table, const int32_t* tokens, int n, float* out) {
  FwdOp op;
  op.kind = FwdKind::kEmbed;
  op.grid_x = n;
  op.table = table;
  op.tokens = tokens;
  op.out = out;
  return op;
}

// out [n, dim] = src rows rows[i].
inline FwdOp fwd_gather_op(const float* src, const int32_t* rows, int n, int dim, float* out) {
  FwdOp op;
  op.kind = FwdKind::kGather;
  op.grid_x = n;
  op.src = src;
  op.src_rows = rows;
  op.dim = dim;
  op.out = out;
  return op;
}

// ---- device --------------------------------------------------------------------------------

// Shared memory of every instruction kind a kTile kernel runs (one at a time).
template <int kTile>
union FwdSmem {
  MatmulSmem<WeightType::F16, kTile> f16;
  MatmulSmem<WeightType::BF16, kTile> bf16;
  MatmulSmem<WeightType::Q8, kTile> q8;
  MatmulSmem<WeightType::Q4, kTile> q4;
  AttnSmem<64> a64;
  AttnSmem<128> a128;
};
static_assert(sizeof(FwdSmem<1>) <= 48 * 1024 && sizeof(FwdSmem<8>) <= 48 * 1024,
              "persistent forward: shared memory over 48 KiB");

__device__ __forceinline__ int fwd_load_acquire(const int* p) {
#if defined(TRT_SPEC_CUDA_EMU)
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

// Waits (every thread calls it) until the instruction's counters reach their targets.
__device__ __forceinline__ void fwd_wait(const FwdProgramView& p, const FwdInstr& in) {
  if (threadIdx.x == 0) {
    for (int w = in.wait_begin; w < in.wait_begin + in.wait_count; ++w) {
      const FwdWait wt = p.waits[w];
      while (fwd_load_acquire(p.counters + wt.counter) < wt.target) {
#if defined(TRT_SPEC_CUDA_EMU)
        // One block at a time: a wait not met now is never met (an order the counters forbid).
        std::fprintf(stderr, "forward program: instruction of op %d waits for counter %d\n", in.op,
                     wt.counter);
        std::abort();
#elif __CUDA_ARCH__ >= 700
        __nanosleep(32);
#endif
      }
    }
  }
  __syncthreads();
  __threadfence();
}

__device__ __forceinline__ void fwd_signal(const FwdProgramView& p, const FwdInstr& in) {
  __syncthreads();
  if (threadIdx.x == 0 && in.signal[0] >= 0) {
    __threadfence();
    atomicAdd(p.counters + in.signal[0], 1);  // its segment's, then its op's
    if (in.signal[1] >= 0) atomicAdd(p.counters + in.signal[1], 1);
  }
}

// The weights of instruction i (a matmul block's; other kinds read none) toward L2, at most
// p.prefetch bytes. The whole block calls it.
__device__ __forceinline__ void fwd_prefetch(const FwdProgramView& p, int64_t i) {
  if (i >= p.n_instrs) return;
  const FwdInstr in = p.instrs[i];
  const FwdOp& op = p.ops[in.op];
  if (op.kind == FwdKind::kMatmul) matmul_prefetch(op.mm, op.geom, in.bx, in.by, p.prefetch);
}

template <WeightType T, int kTile, class Wait>
__device__ __forceinline__ void fwd_matmul(const FwdInstr& in, const FwdOp& op,
                                           MatmulSmem<T, kTile>& sm, Wait&& wait) {
  matmul_block<T, kTile>(op.mm, op.geom, op.partial, op.mm_counters, in.bx, in.by, sm, 0, wait);
}

// attention_block with the op's arguments copied to shared memory first: read where they are
// used, they hold no registers (under the persistent kernel's register bound they spilled).
template <int HD, class Wait>
__device__ __forceinline__ void fwd_attention(const FwdInstr& in, const FwdOp& op, AttnSmem<HD>& sm,
                                              Wait&& wait) {
  constexpr int kWords = sizeof(AttnArgs) / 4;
  static_assert(sizeof(AttnArgs) % 4 == 0 && kWords <= kMatmulThreads, "AttnArgs as words");
  __shared__ AttnArgs args;
  if (threadIdx.x < kWords)
    reinterpret_cast<uint32_t*>(&args)[threadIdx.x] =
        reinterpret_cast<const uint32_t*>(&op.att)[threadIdx.x];
  __syncthreads();
  attention_block<HD, kMatmulWarps>(args, in.bx, op.grid_x, sm, wait);
}

// Instruction i, by the whole block (kMatmulThreads threads), waits and signal included. First,
// with p.prefetch on, the block streams the weights of `ahead` (its next instruction) toward L2,
// and of i itself when `first`: they load while i waits and runs.
template <int kTile>
__device__ __forceinline__ void fwd_run(const FwdProgramView& p, int64_t i, FwdSmem<kTile>& sm,
                                        int64_t ahead, bool first) {
  if (p.prefetch > 0) {
    if (first) fwd_prefetch(p, i);
    fwd_prefetch(p, ahead);
  }
  const FwdInstr in = p.instrs[i];
  const FwdOp& op = p.ops[in.op];
  auto wait = [&] { fwd_wait(p, in); };
  switch (op.kind) {
    case FwdKind::kMatmul:
      switch (op.mm.W.type) {
        case WeightType::F16: fwd_matmul<WeightType::F16, kTile>(in, op, sm.f16, wait); break;
        case WeightType::BF16: fwd_matmul<WeightType::BF16, kTile>(in, op, sm.bf16, wait); break;
        case WeightType::Q8: fwd_matmul<WeightType::Q8, kTile>(in, op, sm.q8, wait); break;
        case WeightType::Q4: fwd_matmul<WeightType::Q4, kTile>(in, op, sm.q4, wait); break;
        default: break;  // (fwd_matmul_op refuses the others)
      }
      break;
    case FwdKind::kAttention:
      if (op.hd_class == 64)
        fwd_attention<64>(in, op, sm.a64, wait);
      else
        fwd_attention<128>(in, op, sm.a128, wait);  // (fwd_attention_op refuses 256)
      break;
    case FwdKind::kEmbed:
      wait();
      embed_row(op.table, op.tokens, in.bx, op.out);
      break;
    case FwdKind::kGather:
      wait();
      gather_row(op.src, op.src_rows, in.bx, op.dim, op.out);
      break;
    case FwdKind::kReset:
      wait();
      for (int c = threadIdx.x; c < p.n_counters; c += blockDim.x) p.counters[c] = 0;
      break;
  }
  fwd_signal(p, in);
}

// The persistent forward: grid = the resident blocks (at most), block kMatmulThreads; block b runs
// instructions b, b + grid, .. (see the file comment).
template <int kTile>
__global__ void __launch_bounds__(kMatmulThreads, matmul_blocks_per_sm(kTile))
    persistent_forward_kernel(FwdProgramView p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  __shared__ FwdSmem<kTile> sm;
  for (int64_t i = blockIdx.x; i < p.n_instrs; i += gridDim.x) {
    if (i != blockIdx.x) __syncthreads();  // the previous instruction's shared memory is free
    fwd_run<kTile>(p, i, sm, i + gridDim.x, i == blockIdx.x);
  }
#endif
}

// One instruction as a launch of one block (the emulation runs the program in chosen orders;
// `ahead`: the instruction whose weights it prefetches, as the persistent kernel's block would).
template <int kTile>
__global__ void __launch_bounds__(kMatmulThreads)
    forward_instruction_kernel(FwdProgramView p, int64_t i, int64_t ahead) {
  __shared__ FwdSmem<kTile> sm;
  fwd_run<kTile>(p, i, sm, ahead, false);
}

// Resident blocks per SM persistent_forward_kernel<tile> is compiled for (its launch bounds): what
// a planning backend counts with; on a GPU the backend asks the occupancy API.
inline int fwd_blocks_per_sm(int tile) {
  return matmul_blocks_per_sm(tile);
}

// The persistent forward of a program planned with tile fwd_tile(n), on `grid` blocks (at most
// the resident ones: check_forward_program).
inline void launch_forward_program(cudaStream_t stream, const FwdProgramView& p, int tile,
                                   int64_t grid) {
  if (tile == 1)
    TRT_SPEC_LAUNCH(persistent_forward_kernel<1>, grid, kMatmulThreads, stream, p);
  else
    TRT_SPEC_LAUNCH(persistent_forward_kernel<8>, grid, kMatmulThreads, stream, p);
}

}  // namespace trt_spec::cuda
