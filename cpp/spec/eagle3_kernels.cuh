// eagle3_kernels.cuh: the CUDA kernels of the EAGLE-3 proposer's ops (eagle3_ops.h) and their
// launch code, header-only so that tests run them through the host emulation
// (tests/cpp/cuda_emu.h). The rows are eagle3_rows.h's, as on the CPU.
//
//   eagle3_absorb_kernel   the [B, k + 1] absorbed rows and each one's last    grid B
//   eagle3_keep_kernel     feat rows of the batch's slots                     grid B
//   eagle3_chain_kernel    the best draft token of each row -> node j         grid B
//   eagle3_top_kernel      a tree step's rows' top tokens (eagle3_tree.h)     grid (B, rows)
//   eagle3_expand_kernel   its candidates and the next rows, by one thread    grid B
//   eagle3_select_kernel   each sequence's tree, by one thread                grid B
#pragma once

#include "kernels/cuda/sampling.cuh"
#include "spec/eagle3_rows.h"
#include "spec/eagle3_tree.h"
#include "spec/top_tokens.cuh"

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

// Row f of sequence b of a tree step's logits [B, rows, draft_vocab]: its top w draft tokens.
__global__ void __launch_bounds__(kSampleThreads)
    eagle3_top_kernel(const float* __restrict__ logits, int rows, int draft_vocab, int w,
                      Eagle3Tree* trees) {
  const int b = blockIdx.x, f = blockIdx.y;
  const float* x = logits + (static_cast<int64_t>(b) * rows + f) * draft_vocab;
  block_top_tokens(x, draft_vocab, w, trees[b].top[f].id, trees[b].top[f].logp);
}

__global__ void eagle3_expand_kernel(const SeqState* __restrict__ seqs,
                                     const int32_t* __restrict__ slots, int j, int w, bool expand,
                                     int max_seq, const int32_t* __restrict__ tokens,
                                     Eagle3Tree* trees, Eagle3TreeRows next) {
  if (threadIdx.x != 0) return;
  const int b = blockIdx.x;
  eagle3_tree_expand(trees[b], seqs[slots[b]], slots[b], b, j, w, expand, max_seq, tokens, next);
}

__global__ void eagle3_select_kernel(SeqState* seqs, const int32_t* __restrict__ slots, int k,
                                     const Eagle3Tree* __restrict__ trees) {
  if (threadIdx.x != 0) return;
  SeqState& s = seqs[slots[blockIdx.x]];
  eagle3_tree_select(trees[blockIdx.x], min(k, s.max_nodes), s);
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

// Tree step j of width w (eagle3_tree.h).
inline void launch_eagle3_tree_step(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                                    int B, int j, int w, bool expand, int max_seq,
                                    const float* logits, int draft_vocab, const int32_t* tokens,
                                    Eagle3Tree* trees, Eagle3TreeRows next,
                                    int threads = kSampleThreads) {
  const int rows = j == 0 ? 1 : w;
  const dim3 grid(static_cast<unsigned>(B), static_cast<unsigned>(rows));
  TRT_SPEC_LAUNCH(eagle3_top_kernel, grid, threads, stream, logits, rows, draft_vocab, w, trees);
  TRT_SPEC_LAUNCH(eagle3_expand_kernel, B, 32, stream, seqs, slots, j, w, expand, max_seq, tokens,
                  trees, next);
}

inline void launch_eagle3_tree_select(cudaStream_t stream, SeqState* seqs, const int32_t* slots,
                                      int B, int k, const Eagle3Tree* trees) {
  TRT_SPEC_LAUNCH(eagle3_select_kernel, B, 32, stream, seqs, slots, k, trees);
}

}  // namespace trt_spec::cuda
