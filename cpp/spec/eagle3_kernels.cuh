// eagle3_kernels.cuh: the CUDA kernels of the EAGLE-3 proposer's ops (eagle3_ops.h) and their
// launch code, header-only so that tests run them through the host emulation
// (tests/cpp/cuda_emu.h). The rows are eagle3_rows.h's, as on the CPU.
//
//   eagle3_absorb_kernel   the [B, k + 1] absorbed rows and each one's last    grid B
//   eagle3_keep_kernel     feat rows of the batch's slots                     grid B
//   eagle3_chain_kernel    the best draft token of each row -> node j         grid B
#pragma once

#include "kernels/cuda/sampling.cuh"
#include "spec/eagle3_rows.h"

namespace trt_spec::cuda {

__global__ void eagle3_absorb_kernel(const SeqState* __restrict__ seqs,
                                     const int32_t* __restrict__ slots, int k, int max_seq,
                                     Eagle3Rows out, int32_t* __restrict__ last) {
  const int b = blockIdx.x;
  const SeqState& s = seqs[slots[b]];
  for (int j = threadIdx.x; j <= k; j += blockDim.x) {
    const int r = b * (k + 1) + j;
    eagle3_absorb_row(s, slots[b], b, j, k, max_seq, out.tokens[r], out.pos[r], out.slot[r],
                      out.src[r]);
  }
  if (threadIdx.x == 0) last[b] = eagle3_last_row(s, b, k);
}

__global__ void eagle3_keep_kernel(const int32_t* __restrict__ slots,
                                   const int32_t* __restrict__ rows, const float* __restrict__ x,
                                   int dim, float* __restrict__ feat) {
  const int b = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[b]) * dim;
  float* dst = feat + static_cast<int64_t>(slots[b]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Row b of logits [B, draft_vocab]: its argmax (larger logit, then lower id, as the CPU).
__global__ void __launch_bounds__(kSampleThreads)
    eagle3_chain_kernel(SeqState* seqs, const int32_t* __restrict__ slots, int j, int max_seq,
                        const float* __restrict__ logits, int draft_vocab,
                        const int32_t* __restrict__ tokens, Eagle3Rows next) {
  const int b = blockIdx.x;
  const float* x = logits + static_cast<int64_t>(b) * draft_vocab;
  ArgMax a{0.0f, -1};
  for (int i = threadIdx.x; i < draft_vocab; i += blockDim.x) a = argmax_pick(a, ArgMax{x[i], i});
  a = block_argmax(a);
  if (threadIdx.x != 0) return;
  eagle3_chain_node(seqs[slots[b]], slots[b], j, max_seq, tokens[a.i], next.tokens[b], next.pos[b],
                    next.slot[b]);
}

inline void launch_eagle3_absorb(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                                 int B, int k, int max_seq, Eagle3Rows out, int32_t* last) {
  TRT_SPEC_LAUNCH(eagle3_absorb_kernel, B, 32, stream, seqs, slots, k, max_seq, out, last);
}

inline void launch_eagle3_keep(cudaStream_t stream, const int32_t* slots, int B,
                               const int32_t* rows, const float* x, int dim, float* feat) {
  TRT_SPEC_LAUNCH(eagle3_keep_kernel, B, 256, stream, slots, rows, x, dim, feat);
}

inline void launch_eagle3_chain(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                                int j, int max_seq, const float* logits, int draft_vocab,
                                const int32_t* tokens, Eagle3Rows next,
                                int threads = kSampleThreads) {
  TRT_SPEC_LAUNCH(eagle3_chain_kernel, B, threads, stream, seqs, slots, j, max_seq, logits,
                  draft_vocab, tokens, next);
}

}  // namespace trt_spec::cuda
