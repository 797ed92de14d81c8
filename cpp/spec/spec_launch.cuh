// spec_launch.cuh: the host launch code of the speculative iteration's CUDA kernels
// (spec_kernels.cuh): grids, blocks and scratch layout, one function per SpecOps op. The CUDA
// SpecOps (spec_ops_cuda.cu) calls these; so do the emulated tests (tests/cpp/cuda_emu_ops.cpp),
// which therefore check the launch code too, not a copy of it.
#pragma once

#include <algorithm>

#include "spec/spec_kernels.cuh"

namespace trt_spec::cuda {

// Scratch of accept: dense p [B, k + 1, vocab] and argmaxes [B, k + 1].
struct AcceptScratch {
  float* P;
  int32_t* best;
};

inline void launch_draft_rows(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                              int B, int j, int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  const int rows = B * (j == 0 ? 2 : 1), threads = 128;
  const int blocks = std::max(1, std::min(64, (rows + threads - 1) / threads));
  TRT_SPEC_LAUNCH(draft_rows_kernel, blocks, threads, stream, seqs, slots, B, j, tokens, pos,
                  row_slots);
}

inline void launch_draft_sample(cudaStream_t stream, float* logits_q, int B, int vocab,
                                int vocab_common, int j, SeqState* seqs, const int32_t* slots,
                                const DevSamplingState* states, int threads = kSpecThreads) {
  TRT_SPEC_LAUNCH(draft_sample_kernel, B, threads, stream, logits_q, vocab, vocab_common, j, seqs,
                  slots, states);
}

inline void launch_verify_rows(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                               int k, int source, int32_t* tokens, int32_t* pos, int32_t* row_slots,
                               int32_t* kv_idx, int32_t* tree_base, uint64_t* tree_bits) {
  TRT_SPEC_LAUNCH(verify_rows_kernel, B, 32, stream, seqs, slots, k, source, tokens, pos, row_slots,
                  kv_idx, tree_base, tree_bits);
}

inline void launch_accept(cudaStream_t stream, const float* logits, const float* q, int B, int k,
                          int vocab, int vocab_draft, SeqState* seqs, const int32_t* slots,
                          const DevSamplingState* states, AcceptScratch scratch, int32_t* history,
                          int max_seq, int32_t* mv_slot, int32_t* mv_src, int32_t* mv_dst,
                          int threads = kSpecThreads) {
  TRT_SPEC_LAUNCH(accept_rows_kernel, B * (k + 1), threads, stream, logits, k, vocab, seqs, slots,
                  states, scratch.P, scratch.best);
  TRT_SPEC_LAUNCH(accept_walk_kernel, B, threads, stream, logits, q, B, k, vocab, vocab_draft, seqs,
                  slots, states, scratch.P, scratch.best, history, max_seq, mv_slot, mv_src,
                  mv_dst);
}

inline void launch_lookup(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                          const int32_t* history, const int32_t* prediction, int max_seq,
                          int threads = kSpecThreads) {
  TRT_SPEC_LAUNCH(lookup_kernel, B, threads, stream, seqs, slots, history, prediction, max_seq);
}

}  // namespace trt_spec::cuda
