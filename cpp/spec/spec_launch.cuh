// spec_launch.cuh: the host launch code of the shared speculative ops' CUDA kernels
// (spec_kernels.cuh): grids, blocks and scratch layout, one function per SpecOps op. The CUDA
// SpecOps (spec_ops_cuda.cu) calls these; so do the emulated tests (tests/cpp/cuda_emu_ops.cpp),
// which therefore check the launch code too, not a copy of it.
#pragma once

#include <algorithm>

#include "spec/spec_kernels.cuh"

namespace trt_spec::cuda {

// Scratch of accept: dense p [B, k + 1, vocab], argmaxes / bonus tokens [B, k + 1] and the
// multi-block rows' scratch for B (k + 1) rows (sample_rows.cuh).
struct AcceptScratch {
  float* P;
  int32_t* best;
  SampleScratch rows;
};

// Rows of the multi-block row scratch accept needs, B (k + 1):
// sample_scratch_bytes(spec_sample_rows(..)) bytes, counters zeroed once.
inline int spec_sample_rows(int max_batch, int max_k) {
  return max_batch * (max_k + 1);
}

inline void launch_verify_rows(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                               int k, int source, int32_t* tokens, int32_t* pos, int32_t* row_slots,
                               int32_t* kv_idx, int32_t* tree_base, uint64_t* tree_bits) {
  TRT_SPEC_LAUNCH(verify_rows_kernel, B, 32, stream, seqs, slots, k, source, tokens, pos, row_slots,
                  kv_idx, tree_base, tree_bits);
}

// Three launches over grid (g.chunks, B (k + 1)) (g = sample_grid(vocab, SMs)), then the walk
// over grid B.
inline void launch_accept(cudaStream_t stream, const SampleGrid& g, const float* logits,
                          const float* q, int B, int k, int vocab, int vocab_draft, SeqState* seqs,
                          const int32_t* slots, const DevSamplingState* states,
                          AcceptScratch scratch, int32_t* history, int max_seq, int32_t* mv_slot,
                          int32_t* mv_src, int32_t* mv_dst) {
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(B * (k + 1)));
  for (int phase = 0; phase < 3; ++phase)
    TRT_SPEC_LAUNCH(accept_rows_kernel, grid, g.threads, stream, phase, logits, k, vocab, g.chunk,
                    seqs, slots, states, scratch.P, scratch.best, scratch.rows);
  TRT_SPEC_LAUNCH(accept_walk_kernel, B, g.threads, stream, logits, q, B, k, vocab, vocab_draft,
                  seqs, slots, states, scratch.P, scratch.best, history, max_seq, mv_slot, mv_src,
                  mv_dst);
}

inline void launch_emitted_rows(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                                int B, int k, int32_t* rows, int32_t* tokens, int32_t* row_slots) {
  TRT_SPEC_LAUNCH(emitted_rows_kernel, B, 32, stream, seqs, slots, k, rows, tokens, row_slots);
}

}  // namespace trt_spec::cuda
