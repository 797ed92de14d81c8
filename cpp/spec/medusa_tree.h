// medusa_tree.h: Medusa's draft tree from its heads' top tokens, and the verify row whose hidden
// state its heads read (plain C++, host and device: the CPU and CUDA ops share them).
//
// Head h (0-based) reads the final hidden state of the row that produced the newest token
// `last` and predicts the token h + 1 places after `last`: tree depth h + 1. The tree is chosen
// best first by the heads' own log-probabilities (a path's score is the sum of its tokens'): a
// node at depth d has the top-K tokens of head d as its candidate children, each parent's best
// unused candidate competes, and the best of those joins, until the tree holds n_max nodes. A
// child never scores above its parent, so the first m nodes of a tree are its best m-node
// tree; siblings are distinct tokens (top-K of one head), and every node is one-hot (q is one-hot
// at its token: the target's draw decides, exactly as for prompt lookup).
#pragma once

#include <cstdint>

#include "spec/draft_tree.h"

namespace trt_spec {

constexpr int kMedusaMaxHeads = 8;  // heads an engine may hold
constexpr int kMedusaTopK = 4;      // candidate tokens per head

// The top tokens of each head for one sequence, best first, with their log-probabilities.
struct MedusaTopK {
  int32_t token[kMedusaMaxHeads][kMedusaTopK];
  float logp[kMedusaMaxHeads][kMedusaTopK];
};

// Builds t from the first `heads` heads' top `topk` tokens: up to n_max nodes (<= kMaxDraftNodes),
// depth at most `heads`; untagged. Returns t.n.
TRT_SPEC_HD int medusa_build_tree(const MedusaTopK& c, int heads, int topk, int n_max,
                                  DraftTree& t) {
  int used_root = 0;                 // the root's children taken (head 0's top tokens)
  int used[kMaxDraftNodes] = {};     // node i's children taken (head depth[i]'s top tokens)
  float score[kMaxDraftNodes] = {};  // node i's path score
  t.n = 0;
  t.tag = 0;
  while (t.n < n_max) {
    int best = -2;  // the parent of the best candidate: -1 the root, -2 none
    float best_score = 0.0f;
    if (used_root < topk) {
      best = -1;
      best_score = c.logp[0][used_root];
    }
    for (int i = 0; i < t.n; ++i) {
      const int d = t.depth[i];  // its children come from head d
      if (d >= heads || used[i] >= topk) continue;
      const float s = score[i] + c.logp[d][used[i]];
      if (best == -2 || s > best_score) {
        best = i;
        best_score = s;
      }
    }
    if (best == -2) break;
    const int i = t.n;
    const int d = best < 0 ? 0 : t.depth[best];  // the head: the new node's depth - 1
    const int j = best < 0 ? used_root++ : used[best]++;
    t.token[i] = c.token[d][j];
    t.parent[i] = static_cast<int8_t>(best);
    t.depth[i] = static_cast<uint8_t>(d + 1);
    t.flags[i] = 0;
    score[i] = best_score;
    t.n = i + 1;
  }
  return t.n;
}

// The verify row whose logits gave a sequence's newest token, after its commit (seq_state.h): the
// root's (0) when it accepted nothing, else its deepest accepted node's.
TRT_SPEC_HD int medusa_stop_row(int n_acc, const int32_t* path) {
  return n_acc == 0 ? 0 : tree_row(path[n_acc - 1]);
}

}  // namespace trt_spec
