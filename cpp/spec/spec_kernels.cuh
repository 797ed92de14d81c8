// spec_kernels.cuh: the CUDA kernels of the ops every speculative iteration shares (spec_ops.h),
// header-only so that tests run them on the CPU through the host emulation (tests/cpp/cuda_emu.h).
// The rules are the shared host/device functions of accept.h and seq_state.h; the token draws
// are the sampling rule's kernels (kernels/cuda/sampling.cuh), the same Philox draws as the CPU.
// (Proposers' own kernels: draft_model_kernels.cuh, lookup_kernels.cuh.)
//
//   verify_rows_kernel    the tree of each sequence, its verify rows    grid B
//   accept_rows_kernel    t(row) or the dense p of each verify row      grid (chunks, B (k+1)) x 3
//   accept_walk_kernel    walk, emitted token, commit, history, moves   grid B
//   emitted_rows_kernel   each emitted token's verify row (logprobs)    grid B
#pragma once

#include "kernels/cuda/sampling.cuh"
#include "spec/accept.h"
#include "spec/seq_state.h"

namespace trt_spec::cuda {

constexpr int kSpecThreads = kSampleThreads;

// Each sequence's tree for (source, k) and its k + 1 verify rows.  grid B, block >= 32.
__global__ void verify_rows_kernel(SeqState* seqs, const int32_t* __restrict__ slots, int k,
                                   int source, int32_t* __restrict__ tokens,
                                   int32_t* __restrict__ pos, int32_t* __restrict__ row_slots,
                                   int32_t* __restrict__ kv_idx, int32_t* __restrict__ tree_base,
                                   uint64_t* __restrict__ tree_bits) {
  const int b = blockIdx.x;
  SeqState* s = seqs + slots[b];
  __shared__ int n_shared;
  if (threadIdx.x == 0) {
    int n = 0;
    if (k > 0 && (s->sources & (1 << source))) n = min(min(k, s->max_nodes), s->tree.n);
    s->tree.n = n;
    s->source = n > 0 ? source : static_cast<int>(DraftSource::kNone);
    n_shared = n;
  }
  __syncthreads();
  const int n = n_shared;
  for (int r = threadIdx.x; r <= k; r += blockDim.x) {
    const int row = b * (k + 1) + r, node = r - 1;
    const bool real = node >= 0 && node < n;
    tokens[row] = real ? s->tree.token[node] : s->last;
    pos[row] = s->n_past + (real ? s->tree.depth[node] : 0);
    row_slots[row] = slots[b];
    kv_idx[row] = s->n_past + r;
    tree_base[row] = s->n_past;
    tree_bits[row] = r == 0 ? 1ull : (real ? tree_row_mask(s->tree, node) : (1ull | (1ull << r)));
  }
}

// Per verify row r = b (k + 1) + row, grid (chunks, B (k + 1)), three launches (phases 0-2):
//   greedy rows: t(row) = the argmax (best[r], phase 0);
//   sampling rows with a dense child: the dense p (P [B, k + 1, vocab], phases 1 and 2);
//   other sampling rows the walk can reach (the root, the tree's nodes): t(row), drawn as a
//   target-only step draws it at generation index n_gen + the node's depth (best[r], phase 1):
//   tested against one-hot children, or emitted as the bonus at a leaf (accept.h).
__global__ void __launch_bounds__(kSpecThreads)
    accept_rows_kernel(int phase, const float* __restrict__ logits, int k, int vocab, int chunk,
                       const SeqState* __restrict__ seqs, const int32_t* __restrict__ slots,
                       const DevSamplingState* __restrict__ states, float* __restrict__ P,
                       int32_t* __restrict__ best, SampleScratch sc) {
  const int r = blockIdx.y, b = r / (k + 1), row = r % (k + 1);
  const SeqState& s = seqs[slots[b]];
  const SamplingParams p = states[slots[b]].params;
  const bool greedy = is_greedy(p);
  const bool dense = !greedy && tree_row_children(s.tree, row) == kRowDense;  // p for the walk
  const bool draw = !greedy && !dense && row <= s.tree.n;                     // t(row)
  if (!greedy && !dense && !draw) return;
  const float* l = logits + static_cast<int64_t>(r) * vocab;
  if (phase == 0) {
    const ArgMax a = rows_max_pass(l, vocab, chunk, sc, r);
    if (a.i < 0 || threadIdx.x != 0) return;
    sc.row(r).mx = a.v;
    if (greedy) best[r] = a.i;
    return;
  }
  if (greedy) return;
  if (draw) {
    if (phase != 1) return;
    const int64_t m = spec_row_gen_index(s, row);
    const uint32_t r24 =
        uniform_bits(philox_uniform(p.seed, static_cast<uint64_t>(m), 0, kSampleStream));
    const int tok = rows_draw_pass(l, vocab, chunk, p, sc.row(r).mx, r24, sc, r);
    if (tok >= 0 && threadIdx.x == 0) best[r] = tok;
    return;
  }
  if (phase == 1) {
    rows_rule_pass(l, vocab, chunk, p, sc.row(r).mx, sc, r);
    return;
  }
  const RowStat rs = sc.row(r);
  rows_probs_pass(l, vocab, vocab, chunk, p, rs, P + static_cast<int64_t>(r) * vocab);
}

// accept.h's Scores over device memory for sequence b.
struct DevScores {
  const float* P;       // [k + 1, vocab] of this sequence
  const int32_t* best;  // [k + 1]
  const float* qb;      // q + b * vocab_draft; node stride B * vocab_draft
  int B, vocab, vocab_draft;
  TRT_SPEC_HD int target(int row) const { return best[row]; }
  TRT_SPEC_HD float p(int row, int32_t t) const {
    return t < vocab ? P[static_cast<int64_t>(row) * vocab + t] : 0.0f;
  }
  TRT_SPEC_HD float q(int node, int32_t t) const {
    return t < vocab_draft ? qb[static_cast<int64_t>(node) * B * vocab_draft + t] : 0.0f;
  }
};

// The walk (thread 0), the emitted token (the whole block), commit, history append and the
// cache moves of each sequence.  grid B.
__global__ void __launch_bounds__(kSpecThreads)
    accept_walk_kernel(const float* __restrict__ logits, const float* __restrict__ q, int B, int k,
                       int vocab, int vocab_draft, SeqState* seqs,
                       const int32_t* __restrict__ slots,
                       const DevSamplingState* __restrict__ states, const float* __restrict__ P,
                       const int32_t* __restrict__ best, int32_t* __restrict__ history, int max_seq,
                       int32_t* __restrict__ mv_slot, int32_t* __restrict__ mv_src,
                       int32_t* __restrict__ mv_dst) {
  __shared__ WalkResult walk;
  __shared__ int32_t old_past, gen_index;
  const int b = blockIdx.x, R = k + 1;
  SeqState* s = seqs + slots[b];
  const SamplingParams p = states[slots[b]].params;
  const bool greedy = is_greedy(p);
  const float* Pb = P + static_cast<int64_t>(b) * R * vocab;
  const DevScores sc{Pb, best + b * R, q ? q + static_cast<int64_t>(b) * vocab_draft : nullptr,
                     B,  vocab,        vocab_draft};
  if (threadIdx.x == 0) {
    walk = spec_walk(s->tree, s->tree.n, greedy, sc, p.seed, s->n_gen, s->path);
    old_past = s->n_past;
    gen_index = s->n_gen + walk.accepted;
  }
  __syncthreads();
  const WalkResult w = walk;
  const int64_t m = gen_index;
  int tok = 0;
  if (greedy || w.dense_node < 0) {  // t(stop_row), from accept_rows_kernel
    tok = best[b * R + w.stop_row];
  } else {  // the dense child was rejected: the residual max(0, p - q) (accept.h)
    const float* pr = Pb + static_cast<int64_t>(w.stop_row) * vocab;
    const float u = spec_uniform(p.seed, m, kStreamResidual);
    const int dn = w.dense_node;
    const IndexDraw d = block_index_draw(
        vocab, [&](int i) { return mass_fx(accept_residual_weight(pr[i], sc.q(dn, i))); },
        uniform_bits(u));
    if (d.total == 0)
      tok = block_sample_dense(pr, vocab, u);
    else
      tok = d.index >= 0 ? d.index : (d.last_nonzero >= 0 ? d.last_nonzero : 0);
  }
  if (threadIdx.x == 0) {
    for (int d = 0; d < w.accepted; ++d) s->out[d] = s->tree.token[s->path[d]];
    s->out[w.accepted] = tok;
    spec_commit(*s, w.accepted);
  }
  __syncthreads();
  const int32_t past = old_past;
  int32_t* h = history + static_cast<int64_t>(slots[b]) * max_seq;
  for (int d = threadIdx.x; d <= w.accepted; d += blockDim.x)
    if (past + 1 + d < max_seq) h[past + 1 + d] = s->out[d];
  for (int d = threadIdx.x; d < kMaxDraftNodes; d += blockDim.x) {
    const int e = b * kMaxDraftNodes + d;
    mv_slot[e] = slots[b];
    mv_src[e] = d < w.accepted ? past + 1 + s->path[d] : -1;
    mv_dst[e] = past + 1 + d;
  }
}

// Each emitted token's verify row, token and slot (SpecOps::emitted_rows).  grid B, block 32.
__global__ void emitted_rows_kernel(const SeqState* __restrict__ seqs,
                                    const int32_t* __restrict__ slots, int k,
                                    int32_t* __restrict__ rows, int32_t* __restrict__ tokens,
                                    int32_t* __restrict__ row_slots) {
  const int b = blockIdx.x;
  const SeqState& s = seqs[slots[b]];
  for (int d = threadIdx.x; d <= k; d += blockDim.x) {
    const int e = b * (k + 1) + d;
    const bool real = d < s.n_new;
    rows[e] = real ? b * (k + 1) + spec_emitted_row(s, d) : -1;
    tokens[e] = real ? s.out[d] : -1;
    row_slots[e] = slots[b];
  }
}

}  // namespace trt_spec::cuda
