// accept.h: the acceptance rule of speculative decoding for chains and trees, written once for
// the host and the device (plain C++; the CPU op and the CUDA kernel both call spec_walk).
//
// Every verify row has the target's own token t(row): its argmax (greedy), or (sampling) the
// token a target-only step would draw there: sample_row's kStreamTarget draw (lane 0) at the
// row's generation index n_gen + its depth.
//
// Sampling (temperature > 0): at a verify row with target distribution p, the walk tests the
// row's children (a dense child has no siblings; one-hot children may be several):
//   - a one-hot child c (a deterministic proposal, prompt lookup's): keep c iff c == t(row).
//     The kept child, or t(row) when none is kept, is emitted: the target's own draw, so the
//     output is token for token what target-only decoding draws for the same seed, whatever
//     lookup proposed. A child is kept with probability p(c), siblings with sum p(c_i): what
//     recursive rejection sampling (SpecInfer) keeps for one-hot q, with no residual to draw;
//   - a dense child d (the draft model's token, drawn from q; Leviathan et al. 2023, Chen et
//     al. 2023): keep d iff u * q(d) < p(d) (u: the kStreamAccept uniform at m = n_gen +
//     depth), which keeps it with probability min(1, p(d) / q(d)); on rejection the emitted
//     token is drawn from the residual normalize(max(0, p - q)) (accept_residual_weight,
//     kStreamResidual). The tokens then depend on the draft's proposals, their distribution
//     does not: this keeps sum_x min(p(x), q(x)), more than matching t(row) would (sum p q).
// The walk descends into a kept child; a row with no children (a leaf, or the root of an empty
// tree) emits t(row), the bonus. Every emitted token is distributed exactly as p at its row.
//
// Greedy (temperature 0): every child is tested as a one-hot one against t(row) = the argmax:
// greedy speculative output is token for token the target-only output.
#pragma once

#include <cstdint>

#include "spec/draft_tree.h"
#include "spec/seq_state.h"

namespace trt_spec {

// Where the walk stopped and what the emitted token is.
// (Trivially constructible: a CUDA kernel keeps one in shared memory.)
struct WalkResult {
  int accepted;    // nodes kept: path[0 .. accepted)
  int stop_row;    // the verify row the emitted token is drawn at
  int dense_node;  // >= 0: this dense child of stop_row was rejected (emit from the residual);
                   // -1: emit t(stop_row)
};

// The walk over the first n nodes of t. Scores supplies the target's verdicts:
//   int target(int row)                  t(row) above (needed at rows with one-hot children)
//   float p(int row, int32_t token)      sampling, rows with a dense child: the rule's p
//   float q(int node, int32_t token)     sampling, dense nodes: the draft's distribution
// Writes the kept nodes to path[0 .. accepted).
template <class Scores>
TRT_SPEC_HD WalkResult spec_walk(const DraftTree& t, int n, bool greedy, const Scores& sc,
                                 uint64_t seed, int64_t n_gen, int32_t* path) {
  WalkResult w{0, 0, -1};
  int node = -1;  // the root
  for (;;) {
    const int row = tree_row(node);
    int kept = -1;
    for (int c = 0; c < n && kept < 0; ++c) {
      if (t.parent[c] != node) continue;
      if (!greedy && (t.flags[c] & kNodeDense)) {
        const float u = spec_uniform(seed, n_gen + w.accepted, kStreamAccept);
        if (u * sc.q(c, t.token[c]) < sc.p(row, t.token[c])) {
          kept = c;
        } else {
          w.dense_node = c;
          break;
        }
      } else if (t.token[c] == sc.target(row)) {
        kept = c;
      }
    }
    if (kept < 0) {
      w.stop_row = row;
      return w;
    }
    path[w.accepted++] = kept;
    node = kept;
  }
}

// The weight of token x in the residual a dense rejection leaves: max(0, p(x) - q(x)). The
// emitted token is drawn from these weights (normalised) with the kStreamResidual uniform; if
// they have no mass (p == q up to rounding, where a rejection cannot really happen) from p.
TRT_SPEC_HD float accept_residual_weight(float p_x, float q_x) {
  return p_x > q_x ? p_x - q_x : 0.0f;
}

}  // namespace trt_spec
