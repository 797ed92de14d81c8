// eagle3_tree.h: an EAGLE-3 head's dynamic draft tree (EAGLE-2's), for the CPU and the CUDA
// kernels alike (plain C++, host and device).
//
// With width w (eagle_topk > 1) a proposal of k nodes runs k head steps. Step j scores the rows of
// the step (j = 0: one row per sequence, its last output; then w rows: the frontier) and makes
// each row's top w draft tokens candidates, children of the row's node, scored by their path's
// log-probability under the head (the sum of its tokens' log-softmax). Unless it is the last
// step, the w best of the step's candidates become the frontier: the next step's rows, each
// reading its node's token at position n_past + j with the output of the row that proposed it as
// its feature, and attending the head's cache [0, n_past) and its own ancestors' rows (a tree mask
// over scratch cache indices n_past + j' w + f, row f of step j' + 1; their bits stay below 64).
// After the last step the tree is the k best candidates. A child never scores above its parent
// (ties go to the shallower node), so the best k hold every chosen node's parent; they are laid
// out by depth, parents first. Siblings are distinct draft tokens (top w of one row) and every
// node is one-hot: the target's own draws accept them or not, exactly as for prompt lookup.
#pragma once

#include <cstdint>

#include "spec/draft_tree.h"
#include "spec/seq_state.h"
#include "spec/spec_ops.h"  // (RowBuffers)

namespace trt_spec {

constexpr int kEagle3MaxTopK = 4;  // the widest tree (eagle_topk)
// Candidates of k <= kMaxDraftNodes steps: w from the first, w * w from each later one.
constexpr int kEagle3MaxCands = kEagle3MaxTopK * (1 + (kMaxDraftNodes - 1) * kEagle3MaxTopK);
// Scratch cache indices a tree's rows use past n_past: (k - 1) w at most.
constexpr int kEagle3TreeCacheRoom = kMaxDraftNodes * kEagle3MaxTopK;

// The top draft tokens of one row, best first (larger logit, then lower id), with their
// log-softmax.
struct Eagle3RowTop {
  int32_t id[kEagle3MaxTopK];
  float logp[kEagle3MaxTopK];
};

// One sequence's candidates during a tree proposal (backend scratch, per batch row).
struct Eagle3Tree {
  int32_t n = 0;                     // candidates so far
  int32_t token[kEagle3MaxCands];    // their target ids
  int16_t parent[kEagle3MaxCands];   // candidate index; -1: the root
  uint8_t depth[kEagle3MaxCands];    // 1 + the parent's (the root's is 0)
  float score[kEagle3MaxCands];      // the path's log-probability
  int16_t front[kEagle3MaxTopK];     // the frontier: candidates of the step's rows
  uint64_t bits[kEagle3MaxTopK];     // their rows' tree masks over scratch indices
  Eagle3RowTop top[kEagle3MaxTopK];  // the step's rows' top tokens (filled before expand)
};

// The row metadata of a tree step's rows [B, w] (backend memory); src: the row of the previous
// step whose output each reads as its feature.
struct Eagle3TreeRows {
  RowBuffers rows;
  int32_t* src = nullptr;
};

// Whether candidate a ranks before candidate b: higher score, then shallower, then earlier.
TRT_SPEC_HD bool eagle3_before(const Eagle3Tree& t, int a, int b) {
  if (t.score[a] != t.score[b]) return t.score[a] > t.score[b];
  if (t.depth[a] != t.depth[b]) return t.depth[a] < t.depth[b];
  return a < b;
}

// Step j of batch row b (slot `slot`, state s), width w, after its rows' top tokens were put in
// t.top (rows: 1 for j = 0, else w): adds the candidates; with `expand` lays out the next step's w
// rows at [b w, b w + w) of `next`. tokens [draft_vocab]: the target id of each draft token.
TRT_SPEC_HD void eagle3_tree_expand(Eagle3Tree& t, const SeqState& s, int32_t slot, int b, int j,
                                    int w, bool expand, int max_seq, const int32_t* tokens,
                                    Eagle3TreeRows next) {
  if (j == 0) t.n = 0;
  const int rows = j == 0 ? 1 : w, first = t.n;
  for (int f = 0; f < rows; ++f) {
    const int par = j == 0 ? -1 : t.front[f];
    for (int r = 0; r < w; ++r) {
      const int c = t.n++;
      t.token[c] = tokens[t.top[f].id[r]];
      t.parent[c] = static_cast<int16_t>(par);
      t.depth[c] = static_cast<uint8_t>(par < 0 ? 1 : t.depth[par] + 1);
      t.score[c] = (par < 0 ? 0.0f : t.score[par]) + t.top[f].logp[r];
    }
  }
  if (!expand) return;
  // The new frontier: the w best of this step's candidates, best first.
  int16_t front[kEagle3MaxTopK];
  uint64_t bits[kEagle3MaxTopK];
  for (int f = 0; f < w; ++f) {
    int best = -1;
    for (int c = first; c < t.n; ++c) {
      bool taken = false;
      for (int g = 0; g < f; ++g) taken = taken || front[g] == c;
      if (!taken && (best < 0 || eagle3_before(t, c, best))) best = c;
    }
    const int from = (best - first) / w;  // the row of this step that proposed it
    front[f] = static_cast<int16_t>(best);
    bits[f] = (j == 0 ? uint64_t{0} : t.bits[from]) | (uint64_t{1} << (j * w + f));
    const int r = b * w + f;
    const int p = s.n_past + j;
    next.rows.tokens[r] = t.token[best];
    next.rows.pos[r] = p < max_seq - 1 ? p : max_seq - 1;
    next.rows.slot[r] = slot;
    next.rows.kv_idx[r] = s.n_past + j * w + f;
    next.rows.tree_base[r] = s.n_past;
    next.rows.tree_bits[r] = bits[f];
    next.src[r] = j == 0 ? b : b * w + from;
  }
  for (int f = 0; f < w; ++f) {
    t.front[f] = front[f];
    t.bits[f] = bits[f];
  }
}

// s's tree from t: its best n_max candidates (n_max <= kMaxDraftNodes), by depth, parents first;
// untagged, one-hot.
TRT_SPEC_HD void eagle3_tree_select(const Eagle3Tree& t, int n_max, SeqState& s) {
  int16_t chosen[kMaxDraftNodes];
  int n = 0;
  for (; n < n_max && n < t.n; ++n) {
    int best = -1;
    for (int c = 0; c < t.n; ++c) {
      bool taken = false;
      for (int g = 0; g < n; ++g) taken = taken || chosen[g] == c;
      if (!taken && (best < 0 || eagle3_before(t, c, best))) best = c;
    }
    chosen[n] = static_cast<int16_t>(best);
  }
  // By depth, then candidate index (insertion sort): a parent stands before its children.
  for (int i = 1; i < n; ++i) {
    const int16_t c = chosen[i];
    int g = i;
    for (; g > 0 && (t.depth[chosen[g - 1]] > t.depth[c] ||
                     (t.depth[chosen[g - 1]] == t.depth[c] && chosen[g - 1] > c));
         --g)
      chosen[g] = chosen[g - 1];
    chosen[g] = c;
  }
  DraftTree& tree = s.tree;
  tree.n = n;
  tree.tag = 0;
  for (int i = 0; i < n; ++i) {
    const int c = chosen[i];
    int parent = -1;
    for (int g = 0; g < i; ++g)
      if (chosen[g] == t.parent[c]) parent = g;
    tree.token[i] = t.token[c];
    tree.parent[i] = static_cast<int8_t>(parent);
    tree.depth[i] = t.depth[c];
    tree.flags[i] = 0;
  }
}

}  // namespace trt_spec
