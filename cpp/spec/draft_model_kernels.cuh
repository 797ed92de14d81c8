// draft_model_kernels.cuh: the CUDA kernels of the draft model proposer's ops (draft_model_ops.h)
// and their launch code, header-only so that tests run them through the host emulation
// (tests/cpp/cuda_emu.h). The draws are the sampling rule's kernels (kernels/cuda/sampling.cuh),
// the same Philox draws as the CPU.
//
//   draft_rows_kernel     chain rows of draft step j                    grid-stride
//   draft_sample_kernel   node j of each chain (and q_j in place)       grid (chunks, B) x 3
#pragma once

#include <algorithm>

#include "kernels/cuda/sampling.cuh"
#include "spec/seq_state.h"

namespace trt_spec::cuda {

// Rows of draft step j (see DraftModelOps::draft_rows).
__global__ void draft_rows_kernel(const SeqState* __restrict__ seqs,
                                  const int32_t* __restrict__ slots, int B, int j,
                                  int32_t* __restrict__ tokens, int32_t* __restrict__ pos,
                                  int32_t* __restrict__ row_slots) {
  const int per = j == 0 ? 2 : 1;
  for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < B * per;
       row += gridDim.x * blockDim.x) {
    const int b = row / per, r = row % per;
    const SeqState& s = seqs[slots[b]];
    if (j == 0) {
      tokens[row] = r == 0 ? s.prev : s.last;
      pos[row] = spec_draft_pos(s, s.n_past - 1 + r);
    } else {
      tokens[row] = s.tree.token[j - 1];
      pos[row] = spec_draft_pos(s, s.n_past + j);
    }
    row_slots[row] = slots[b];
  }
}

// The rows of the next draft step (draft_rows_kernel's j + 1 output), or all null.
struct NextRows {
  int32_t* tokens;
  int32_t* pos;
  int32_t* slot;
};

// Node j of each chain from logits_q [B, vocab]; sampling rows become q_j in place.
// grid (chunks, B), three launches: phase 0 the maxima over [0, vocab_common) (greedy: the
// node), phase 1 the kept mass, phase 2 q_j and the node drawn from it (sample_dense); phase 2
// also writes the next step's row b (node j at n_past + j + 1) when `next` is given.
__global__ void __launch_bounds__(kSampleThreads)
    draft_sample_kernel(int phase, float* logits_q, int vocab, int vocab_common, int chunk, int j,
                        SeqState* seqs, const int32_t* __restrict__ slots,
                        const DevSamplingState* __restrict__ states, SampleScratch sc,
                        NextRows next) {
  const int b = blockIdx.y;
  SeqState* s = seqs + slots[b];
  const SamplingParams p = states[slots[b]].params;
  float* row = logits_q + static_cast<int64_t>(b) * vocab;
  auto write_next = [&](int32_t node) {
    if (!next.tokens) return;
    next.tokens[b] = node;
    next.pos[b] = spec_draft_pos(*s, s->n_past + j + 1);
    next.slot[b] = slots[b];
  };
  if (phase == 0) {
    const ArgMax a = rows_max_pass(row, vocab_common, chunk, sc, b);
    if (a.i < 0 || threadIdx.x != 0) return;
    sc.row(b).mx = a.v;
    if (is_greedy(p)) tree_set_chain_node(s->tree, j, a.i, kNodeDense);
    return;
  }
  if (is_greedy(p)) {
    if (phase == 2 && blockIdx.x == 0 && threadIdx.x == 0) write_next(s->tree.token[j]);
    return;
  }
  if (phase == 1) {
    rows_rule_pass(row, vocab_common, chunk, p, sc.row(b).mx, sc, b);
    return;
  }
  const RowStat rs = sc.row(b);
  const ProbsSum ps = rows_probs_pass(row, vocab_common, vocab, chunk, p, rs, row);
  const int d = rows_dense_draw(row, vocab, chunk, ps,
                                spec_uniform(p.seed, s->n_gen + j, kStreamDraft), sc, b);
  if (d >= 0 && threadIdx.x == 0) {
    tree_set_chain_node(s->tree, j, d, kNodeDense);
    write_next(d);
  }
}

inline void launch_draft_rows(cudaStream_t stream, const SeqState* seqs, const int32_t* slots,
                              int B, int j, int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  const int rows = B * (j == 0 ? 2 : 1), threads = 128;
  const int blocks = std::max(1, std::min(64, (rows + threads - 1) / threads));
  TRT_SPEC_LAUNCH(draft_rows_kernel, blocks, threads, stream, seqs, slots, B, j, tokens, pos,
                  row_slots);
}

// Three launches over grid (g.chunks, B), g = sample_grid(vocab, SMs); rows: scratch of B rows.
inline void launch_draft_sample(cudaStream_t stream, const SampleGrid& g, float* logits_q, int B,
                                int vocab, int vocab_common, int j, SeqState* seqs,
                                const int32_t* slots, const DevSamplingState* states,
                                SampleScratch rows, NextRows next = {}) {
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(B));
  for (int phase = 0; phase < 3; ++phase)
    TRT_SPEC_LAUNCH(draft_sample_kernel, grid, g.threads, stream, phase, logits_q, vocab,
                    vocab_common, g.chunk, j, seqs, slots, states, rows, next);
}

}  // namespace trt_spec::cuda
