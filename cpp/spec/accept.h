// accept.h: the acceptance rule of speculative decoding for chains and trees, written once for
// the host and the device (plain C++; the CPU op and the CUDA kernel both call spec_walk).
//
// Sampling (temperature > 0), after Leviathan et al. 2023 and Chen et al. 2023 for one draft
// token, and recursive rejection sampling (SpecInfer, Miao et al. 2024; EAGLE-2) for trees:
// at a verify row with target distribution p, its children c_1, c_2, .. are tested in index
// order against the residual r (r = p at first):
//   - a dense child d (the draft model's token, drawn from q):  keep d iff u * q(d) < r(d);
//     on rejection r <- normalize(max(0, r - q)) (a dense child has no siblings);
//   - a one-hot child c (a deterministic proposal, q = one-hot at c): keep c iff u < r(c);
//     on rejection r <- r with c removed, renormalised. Siblings have distinct tokens, so with
//     `removed` the p-mass of the rejected siblings, r(c) = p(c) / (1 - removed): keep iff
//     u * (1 - removed) < p(c).
// The first kept child is emitted and the walk descends into it; when every child of a row is
// rejected the token emitted there is drawn from the final residual (accept_residual_weight);
// a row with no children (a leaf, or the root of an empty tree) emits a bonus token drawn from p
// exactly as a target-only step draws it. Every emitted token is therefore distributed as p at
// its row: the output follows the target's distribution whatever the proposals.
//
// Greedy (temperature 0): p is one-hot at the target's argmax a, so the rule reduces to: keep
// the child whose token is a (at most one, tokens being distinct or the child unique), else
// emit a. Greedy speculative output is thus token for token the target-only output.
//
// Uniforms: the test of the s-th child at generation index m = n_gen + depth uses
// spec_uniform(seed, m, kStreamAccept, s); the residual draw kStreamResidual (lane 0); the bonus
// sample_row's kStreamTarget draw (lane 0), so a bonus equals the target-only token.
#pragma once

#include <cstdint>

#include "spec/draft_tree.h"
#include "spec/seq_state.h"

namespace trt_spec {

// Where the walk stopped and what the emitted token is drawn from.
// (Trivially constructible: a CUDA kernel keeps one in shared memory.)
struct WalkResult {
  int accepted;       // nodes kept: path[0 .. accepted)
  int stop_row;       // the verify row the emitted token is drawn at
  int tested;         // children of stop_row tested (0: a leaf, the bonus is drawn from p)
  int dense_node;     // >= 0: the rejected child was this dense node (residual max(0, p - q))
  uint32_t rejected;  // bit i: one-hot node i was rejected at stop_row (residual: p without)
};

// The walk over the first n nodes of t. Scores supplies the target's verdicts:
//   int argmax(int row)                  greedy sequences: the target's token at a verify row
//   float p(int row, int32_t token)      sampling: the rule's dense distribution at a row
//   float q(int node, int32_t token)     sampling, dense nodes: the draft's distribution
// Writes the kept nodes to path[0 .. accepted).
template <class Scores>
TRT_SPEC_HD WalkResult spec_walk(const DraftTree& t, int n, bool greedy, const Scores& sc,
                                 uint64_t seed, int64_t n_gen, int32_t* path) {
  WalkResult w{0, 0, 0, -1, 0};
  int node = -1;  // the root
  for (;;) {
    const int row = tree_row(node);
    const int64_t m = n_gen + w.accepted;
    int kept = -1, tested = 0;
    uint32_t rejected = 0;
    int dense = -1;
    if (greedy) {
      const int32_t a = sc.argmax(row);
      for (int c = 0; c < n && kept < 0; ++c)
        if (t.parent[c] == node) {
          ++tested;
          if (t.token[c] == a) kept = c;
        }
    } else {
      float removed = 0.0f;
      for (int c = 0; c < n && kept < 0 && dense < 0; ++c) {
        if (t.parent[c] != node) continue;
        const float u = spec_uniform(seed, m, kStreamAccept, static_cast<uint32_t>(tested));
        const float p = sc.p(row, t.token[c]);
        ++tested;
        if (t.flags[c] & kNodeDense) {
          if (u * sc.q(c, t.token[c]) < p)
            kept = c;
          else
            dense = c;
        } else if (u * (1.0f - removed) < p) {
          kept = c;
        } else {
          removed += p;
          rejected |= uint32_t{1} << c;
        }
      }
    }
    if (kept < 0) {
      w.stop_row = row;
      w.tested = tested;
      w.dense_node = dense;
      w.rejected = rejected;
      return w;
    }
    path[w.accepted++] = kept;
    node = kept;
  }
}

// The weight of token x in the residual a rejection leaves: max(0, p(x) - q(x)), q being the
// rejected dense node's distribution, or 1 at a rejected one-hot token and 0 elsewhere. The
// emitted token is drawn from these weights (normalised) with the kStreamResidual uniform; if
// they have no mass (p == q up to rounding, where a rejection cannot really happen) from p.
TRT_SPEC_HD float accept_residual_weight(float p_x, float q_x) {
  return p_x > q_x ? p_x - q_x : 0.0f;
}

}  // namespace trt_spec
