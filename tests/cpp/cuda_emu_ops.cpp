// cuda_emu_ops.cpp: the CUDA kernels (cpp/kernels/cuda/*.cuh, cpp/spec/spec_kernels.cuh)
// compiled as host code against cuda_emu.h, behind a C interface for
// tests/test_cuda_emulated.py (ctypes), on host memory. The transformer ops launch the same
// kernels, grids and blocks as CudaBackend does (cpp/backend/cuda/*.cu); the speculative ops call
// the CUDA SpecOps' own launch functions (cpp/spec/spec_launch.cuh).
//
//   g++ -std=c++20 -O1 -pthread -shared -fPIC -DTRT_SPEC_CUDA_EMU -Icpp -Itests/cpp \
//       tests/cpp/cuda_emu_ops.cpp -o libcuda_emu.so
#include <cstddef>

#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/sampling.cuh"
#include "spec/spec_launch.cuh"

using namespace trt_spec;
using namespace trt_spec::cuda;
using cuda_emu::launch;

namespace {

DevWeight host_weight(int type, const uint8_t* blob, int64_t rows, int64_t cols) {
  return dev_weight(WeightView{static_cast<WeightType>(type), rows, cols, blob});
}

template <WeightType T>
void gemv_typed(const DevWeight& W, const float* x, int n, const float* bias, float* out,
                int tile) {
  const dim3 grid = gemv_grid(W, n, tile);
  switch (tile) {
    case 1: launch(grid, kGemvThreads, gemv_kernel<T, 1>, W, x, n, bias, out); break;
    case 2: launch(grid, kGemvThreads, gemv_kernel<T, 2>, W, x, n, bias, out); break;
    case 4: launch(grid, kGemvThreads, gemv_kernel<T, 4>, W, x, n, bias, out); break;
    case 8: launch(grid, kGemvThreads, gemv_kernel<T, 8>, W, x, n, bias, out); break;
    default: launch(grid, kGemvThreads, gemv_kernel<T, 16>, W, x, n, bias, out); break;
  }
}

}  // namespace

extern "C" {

int emu_sampling_state_bytes() {
  return static_cast<int>(sizeof(DevSamplingState));
}
int emu_seq_state_bytes() {
  return static_cast<int>(sizeof(SeqState));
}

// out [n, rows] = x [n, cols] @ W^T (+ bias); tile 0: the backend's choice. Returns 1 when the
// vectorized kernel ran, 0 for the scalar one.
int emu_gemv(int type, const uint8_t* blob, int64_t rows, int64_t cols, const float* x, int n,
             const float* bias, float* out, int tile) {
  const DevWeight W = host_weight(type, blob, rows, cols);
  if (!gemv_vectorized(W, x)) {
    launch(gemv_grid(W, n, 1), kGemvThreads, gemv_scalar_kernel, W, x, n, bias, out);
    return 0;
  }
  if (tile <= 0) tile = gemv_tile_rows(n);
  switch (W.type) {
    case WeightType::F32: gemv_typed<WeightType::F32>(W, x, n, bias, out, tile); break;
    case WeightType::F16: gemv_typed<WeightType::F16>(W, x, n, bias, out, tile); break;
    case WeightType::BF16: gemv_typed<WeightType::BF16>(W, x, n, bias, out, tile); break;
    case WeightType::Q8: gemv_typed<WeightType::Q8>(W, x, n, bias, out, tile); break;
    case WeightType::Q4: gemv_typed<WeightType::Q4>(W, x, n, bias, out, tile); break;
  }
  return 1;
}

void emu_embed(int type, const uint8_t* blob, int64_t rows, int64_t cols, const int32_t* tokens,
               int n, float* out) {
  launch(dim3(n), kRowThreads, embed_kernel, host_weight(type, blob, rows, cols), tokens, out);
}

void emu_rmsnorm(const float* x, const float* g, float eps, int n, int dim, float* out) {
  launch(dim3(n), kRowThreads, rmsnorm_kernel, x, g, eps, dim, out);
}

void emu_rope(float* qkv, const int32_t* pos, int n, int nh, int nkv, int hd, const float* cos_t,
              const float* sin_t) {
  launch(dim3(n), kRowThreads, rope_kernel, qkv, pos, nh, nkv, hd, cos_t, sin_t);
}

void emu_swiglu(const float* gate_up, int n, int ffn, float* out) {
  const int64_t count = static_cast<int64_t>(n) * ffn;
  launch(dim3(elementwise_blocks(count, 256)), 256, swiglu_kernel, gate_up, int64_t{n}, ffn, out);
}

// threads: of the sampling blocks (the backend's kSampleThreads = 512; fewer keep the emulation
// fast, the algorithms take any multiple of 32 up to 1024).
void emu_sample(const float* logits, int n, int vocab, const int32_t* slot, void* states,
                int32_t* out, int threads) {
  launch(dim3(1), threads, sample_kernel, logits, n, vocab, slot,
         static_cast<DevSamplingState*>(states), out);
}

// The speculative ops, through the CUDA SpecOps' launch functions (spec_launch.cuh).
void emu_spec_draft_rows(const void* seqs, const int32_t* slots, int B, int j, int32_t* tokens,
                         int32_t* pos, int32_t* row_slots) {
  launch_draft_rows(nullptr, static_cast<const SeqState*>(seqs), slots, B, j, tokens, pos,
                    row_slots);
}

void emu_spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j, void* seqs,
                           const int32_t* slots, const void* states, int threads) {
  launch_draft_sample(nullptr, logits_q, B, vocab, vocab_common, j, static_cast<SeqState*>(seqs),
                      slots, static_cast<const DevSamplingState*>(states), threads);
}

void emu_spec_verify_rows(void* seqs, const int32_t* slots, int B, int k, int source,
                          int32_t* tokens, int32_t* pos, int32_t* row_slots, int32_t* kv_idx,
                          int32_t* tree_base, uint64_t* tree_bits) {
  launch_verify_rows(nullptr, static_cast<SeqState*>(seqs), slots, B, k, source, tokens, pos,
                     row_slots, kv_idx, tree_base, tree_bits);
}

// P: [B, k + 1, vocab] scratch, best: [B (k + 1)] scratch; history [slots, max_seq]; moves
// [B kMaxDraftNodes] each.
void emu_spec_accept(const float* logits, const float* q, int B, int k, int vocab, int vocab_draft,
                     void* seqs, const int32_t* slots, const void* states, float* P, int32_t* best,
                     int32_t* history, int max_seq, int32_t* mv_slot, int32_t* mv_src,
                     int32_t* mv_dst, int threads) {
  launch_accept(nullptr, logits, q, B, k, vocab, vocab_draft, static_cast<SeqState*>(seqs), slots,
                static_cast<const DevSamplingState*>(states), AcceptScratch{P, best}, history,
                max_seq, mv_slot, mv_src, mv_dst, threads);
}

void emu_spec_lookup(void* seqs, const int32_t* slots, int B, const int32_t* history,
                     const int32_t* prediction, int max_seq, int threads) {
  launch_lookup(nullptr, static_cast<SeqState*>(seqs), slots, B, history, prediction, max_seq,
                threads);
}

}  // extern "C"
