// penalty_kernels.cuh: the CUDA kernels of the logit processors (spec_ops.h penalize,
// penalize_rows, count_emitted, mask_rows), header-only so that tests run them through the host
// emulation. The arithmetic per logit is penalty_rows.h's, the host's.
//
//   penalize_kernel       verify row r = b (k + 1) + row, a plain or draft row grid rows
//   count_emitted_kernel  the emitted tokens into the counts                  grid B
//   mask_rows_kernel      a structured-output mask on each row (mask_rows.h)   grid rows
#pragma once

#include "kernels/cuda/common.cuh"
#include "spec/mask_rows.h"
#include "spec/penalty_rows.h"
#include "spec/seq_state.h"
#include "spec/spec_ops.h"

namespace trt_spec::cuda {

constexpr int kPenaltyThreads = 256;

// k >= 0: the verify rows [B, k + 1] of sequences slots[b] (seqs: their trees); k < 0: plain
// rows, row r of the sequence in slots[r], seeing the path of node `node` of its tree (seqs;
// -1: none). Rows [rows, stride], ids [0, vocab).  grid rows, block kPenaltyThreads.
__global__ void __launch_bounds__(kPenaltyThreads)
    penalize_kernel(const SeqState* __restrict__ seqs, PenaltyState ps,
                    const int32_t* __restrict__ slots, int k, int node, float* __restrict__ logits,
                    int stride, int vocab) {
  const int r = blockIdx.x;
  const int b = k >= 0 ? r / (k + 1) : r, row = k >= 0 ? r % (k + 1) : 0;
  const int slot = slots[b];
  const PenaltyParams& p = ps.params[slot];
  if (!p.active) return;
  __shared__ int32_t path[kMaxDraftNodes];
  __shared__ int n_path;
  if (threadIdx.x == 0) {
    n_path = 0;
    if (k >= 0 && row > 0) {
      const DraftTree& t = seqs[slot].tree;
      n_path = row - 1 < t.n ? penalty_path(t, row - 1, path) : -1;  // -1: a padding row
    } else if (k < 0 && node >= 0) {
      n_path = penalty_path(seqs[slot].tree, node, path);
    }
  }
  __syncthreads();
  if (n_path < 0) return;
  float* l = logits + static_cast<int64_t>(r) * stride;
  const int32_t* counts = ps.counts + static_cast<int64_t>(slot) * ps.vocab;
  const uint32_t* prompt = ps.prompt + static_cast<int64_t>(slot) * ps.words;
  for (int x = threadIdx.x; x < vocab; x += blockDim.x)
    l[x] = penalty_logit(l[x], x, counts, prompt, path, n_path, p);
  __syncthreads();
  for (int j = threadIdx.x; j < p.n_bias; j += blockDim.x)  // (the ids are distinct)
    if (p.bias_id[j] >= 0 && p.bias_id[j] < vocab) l[p.bias_id[j]] += p.bias[j];
}

// counts[slot] += the tokens the last iteration emitted (out[0 .. n_new)).  grid B, block 32.
__global__ void count_emitted_kernel(const SeqState* __restrict__ seqs, PenaltyState ps,
                                     const int32_t* __restrict__ slots) {
  const int slot = slots[blockIdx.x];
  if (!ps.params[slot].active || threadIdx.x != 0) return;
  penalty_count_emitted(seqs[slot], ps.counts + static_cast<int64_t>(slot) * ps.vocab, ps.vocab);
}

// Logits [n, vocab] masked by masks [n, words].  grid n, block kPenaltyThreads.
__global__ void __launch_bounds__(kPenaltyThreads)
    mask_rows_kernel(float* __restrict__ logits, int vocab, const uint32_t* __restrict__ masks,
                     int words) {
  const int r = blockIdx.x;
  float* l = logits + static_cast<int64_t>(r) * vocab;
  const uint32_t* m = masks + static_cast<int64_t>(r) * words;
  for (int x = threadIdx.x; x < vocab; x += blockDim.x)
    if (!mask_allows(m, words, x)) l[x] = -INFINITY;
}

inline void launch_mask_rows(cudaStream_t stream, float* logits, int n, int vocab,
                             const uint32_t* masks, int words) {
  if (n <= 0) return;
  TRT_SPEC_LAUNCH(mask_rows_kernel, n, kPenaltyThreads, stream, logits, vocab, masks, words);
}

// node, stride: penalize_kernel's (stride 0: vocab).
inline void launch_penalize(cudaStream_t stream, const SeqState* seqs, const PenaltyState& ps,
                            const int32_t* slots, int rows, int k, float* logits, int vocab,
                            int node = -1, int stride = 0) {
  if (rows <= 0) return;
  TRT_SPEC_LAUNCH(penalize_kernel, rows, kPenaltyThreads, stream, seqs, ps, slots, k, node, logits,
                  stride > 0 ? stride : vocab, vocab);
}

inline void launch_count_emitted(cudaStream_t stream, const SeqState* seqs, const PenaltyState& ps,
                                 const int32_t* slots, int B) {
  if (B <= 0) return;
  TRT_SPEC_LAUNCH(count_emitted_kernel, B, 32, stream, seqs, ps, slots);
}

}  // namespace trt_spec::cuda
