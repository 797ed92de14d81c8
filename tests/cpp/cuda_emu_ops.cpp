// cuda_emu_ops.cpp: the CUDA kernels (cpp/kernels/cuda/*.cuh) compiled as host code against
// cuda_emu.h, behind a C interface for tests/test_cuda_emulated.py (ctypes). Each function
// launches the same kernels, grids and blocks as CudaBackend does (cpp/cuda/*.cu), on host memory.
//
//   g++ -std=c++20 -O1 -pthread -shared -fPIC -DTRT_SPEC_CUDA_EMU -Icpp -Itests/cpp \
//       tests/cpp/cuda_emu_ops.cpp -o libcuda_emu.so
#include <cstddef>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/sampling.cuh"

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

// k, v: the cache [slots, layers, nkv, max_seq, hd]; partial: [n nh splits (hd + 2)] scratch.
void emu_attention(const float* qkv, const int32_t* pos, const int32_t* slot, int n, int nh,
                   int nkv, int hd, float scale, float* k, float* v, int layers, int max_seq,
                   int layer, int splits, float* partial, float* out) {
  const KvView kv{k, v, layers, nkv, max_seq, hd};
  launch(dim3(n), 256, kv_write_kernel, qkv, pos, slot, nh, kv, layer);
  launch(dim3(n * nh, splits), kAttnThreads, attention_kernel, qkv, pos, slot, nh, scale, kv, layer,
         out, partial);
  if (splits > 1)
    launch(dim3(n * nh), kAttnThreads, attention_combine_kernel, static_cast<const float*>(partial),
           splits, nh, hd, out);
}

// threads: of the sampling blocks (the backend's kSampleThreads = 512; fewer keep the emulation
// fast, the algorithms take any multiple of 32 up to 1024).
void emu_sample(const float* logits, int n, int vocab, const int32_t* slot, void* states,
                int32_t* out, int threads) {
  launch(dim3(1), threads, sample_kernel, logits, n, vocab, slot,
         static_cast<DevSamplingState*>(states), out);
}

void emu_spec_rows(const void* seqs, const int32_t* slots, int B, int first, int count,
                   int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  launch(dim3(1), 256, spec_rows_kernel, static_cast<const SeqState*>(seqs), slots, B, first, count,
         tokens, pos, row_slots);
}

void emu_spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j, void* seqs,
                           const int32_t* slots, const void* states, int threads) {
  launch(dim3(B), threads, spec_draft_sample_kernel, logits_q, vocab, vocab_common, j,
         static_cast<SeqState*>(seqs), slots, static_cast<const DevSamplingState*>(states));
}

// P: [B, k, vocab] scratch, best: [B (k + 1)] scratch.
void emu_spec_accept(const float* logits, const float* q, int B, int k, int vocab, int vocab_draft,
                     void* seqs, const int32_t* slots, const void* states, float* P, int32_t* best,
                     int threads) {
  auto* st = static_cast<const DevSamplingState*>(states);
  launch(dim3(B * (k + 1)), threads, spec_accept_rows_kernel, logits, k, vocab, slots, st, P, best);
  launch(dim3(B), threads, spec_accept_walk_kernel, logits, q, B, k, vocab, vocab_draft,
         static_cast<SeqState*>(seqs), slots, st, static_cast<const float*>(P),
         static_cast<const int32_t*>(best));
}

}  // extern "C"
