// medusa_kernels.cuh: the CUDA kernels of the Medusa proposer's ops (medusa_ops.h) and their
// launch code, header-only so that tests run them through the host emulation
// (tests/cpp/cuda_emu.h). The tree is medusa_tree.h's, as on the CPU.
//
//   medusa_keep_kernel   the stop row's hidden state of each sequence        grid B
//   medusa_topk_kernel   top kMedusaTopK tokens and log-probs of a head's row grid (B, heads)
//   medusa_tree_kernel   each sequence's tree, by one thread                  grid B
#pragma once

#include "kernels/cuda/sampling.cuh"
#include "spec/medusa_tree.h"
#include "spec/seq_state.h"
#include "spec/top_tokens.cuh"

namespace trt_spec::cuda {

__global__ void medusa_keep_kernel(const SeqState* __restrict__ seqs,
                                   const int32_t* __restrict__ slots, int k,
                                   const float* __restrict__ hidden, int dim,
                                   float* __restrict__ kept) {
  const int b = blockIdx.x;
  const SeqState& s = seqs[slots[b]];
  const int64_t row = static_cast<int64_t>(b) * (k + 1) + medusa_stop_row(s.n_acc, s.path);
  float* dst = kept + static_cast<int64_t>(slots[b]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = hidden[row * dim + i];
}

// Row (head h, sequence b) of logits [heads, B, vocab]: its top tokens (top_tokens.cuh).
__global__ void __launch_bounds__(kSampleThreads)
    medusa_topk_kernel(const float* __restrict__ logits, int B, int vocab,
                       MedusaTopK* __restrict__ out) {
  const int b = blockIdx.x, h = blockIdx.y;
  const float* x = logits + (static_cast<int64_t>(h) * B + b) * vocab;
  block_top_tokens(x, vocab, kMedusaTopK, out[b].token[h], out[b].logp[h]);
}

__global__ void medusa_tree_kernel(SeqState* seqs, const int32_t* __restrict__ slots, int k,
                                   int heads, const MedusaTopK* __restrict__ top) {
  if (threadIdx.x != 0) return;
  SeqState& s = seqs[slots[blockIdx.x]];
  medusa_build_tree(top[blockIdx.x], heads, kMedusaTopK, min(k, s.max_nodes), s.tree);
}

inline void launch_medusa_keep(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                               int B, int k, const float* hidden, int dim, float* kept) {
  TRT_SPEC_LAUNCH(medusa_keep_kernel, B, 256, stream, seqs, slots, k, hidden, dim, kept);
}

// top: scratch [B] records.
inline void launch_medusa_tree(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                               int k, const float* logits, int heads, int vocab, MedusaTopK* top,
                               int threads = kSampleThreads) {
  const dim3 grid(static_cast<unsigned>(B), static_cast<unsigned>(heads));
  TRT_SPEC_LAUNCH(medusa_topk_kernel, grid, threads, stream, logits, B, vocab, top);
  TRT_SPEC_LAUNCH(medusa_tree_kernel, B, 32, stream, seqs, slots, k, heads, top);
}

}  // namespace trt_spec::cuda
