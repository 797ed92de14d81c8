// draft_tree.h: one iteration's proposal for one sequence, a tree of draft tokens rooted at the
// sequence's newest token, and the names of the draft sources (plain C++, host and device).
//
// Node i holds a token and its parent: -1 for the root (the newest token `last`, not yet in the
// caches), otherwise a node with a lower index (parents come first, so the first m nodes of a
// tree are a tree too). A chain is parent[i] = i - 1. The verify pass scores the root and every
// node in one pass of n + 1 rows:
//   row 0      the root   at position n_past              (cache index n_past)
//   row 1 + i  node i     at position n_past + depth[i]   (cache index n_past + 1 + i)
// Each row attends the sequence's cache [0, n_past) and its own ancestors (tree mask), so
// siblings never see each other. Accepted nodes are moved to their positions afterwards
// (a chain needs no move: its cache indices are its positions).
//
// q of a node (the distribution it was drawn from, needed to accept it exactly when sampling):
// kNodeDense marks a draft model's dense distribution (kept by the iteration, [node, seq,
// vocab]); otherwise the node was chosen deterministically (prompt lookup) and q is one-hot at
// its token. A node's children are either one dense node or any number of one-hot nodes with
// distinct tokens (accept.h relies on it).
#pragma once

#include <cstdint>

#include "kernels/philox.h"  // TRT_SPEC_HD

namespace trt_spec {

// The most draft tokens (tree nodes) one sequence may propose per iteration.
constexpr int kMaxDraftNodes = 16;

// Where an iteration's draft tokens come from. Names (draft_source_name) are the public API's.
enum class DraftSource : int32_t {
  kNone = 0,    // no draft: a plain target step (k = 0)
  kModel = 1,   // the draft model's chain
  kLookup = 2,  // prompt lookup: continuations of the newest n-gram found earlier in the text
};
constexpr int kDraftSourceCount = 3;

// Bit (1 << source) of a request's allowed sources.
TRT_SPEC_HD constexpr int32_t draft_source_bit(DraftSource s) {
  return int32_t{1} << static_cast<int32_t>(s);
}

inline const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::kNone: return "none";
    case DraftSource::kModel: return "model";
    case DraftSource::kLookup: return "lookup";
  }
  return "?";
}

enum DraftNodeFlags : uint8_t {
  kNodeDense = 1,      // q is the draft model's dense distribution (else one-hot at the token)
  kNodePredicted = 2,  // copied from the caller's predicted output
};

struct DraftTree {
  int32_t n = 0;                       // nodes
  int32_t tag = 0;                     // its proposer's note on it (prompt lookup: the n-gram
                                       // length it continues; 0: none), reported with its outcome
  int32_t token[kMaxDraftNodes] = {};  // node tokens
  int8_t parent[kMaxDraftNodes] = {};  // -1: the root; else a lower node index
  uint8_t depth[kMaxDraftNodes] = {};  // 1 + the parent's depth (the root's depth is 0)
  uint8_t flags[kMaxDraftNodes] = {};  // DraftNodeFlags
};

// Verify row of node i (row 0 is the root).
TRT_SPEC_HD int tree_row(int node) {
  return node + 1;
}

// Rows of the tree a verify row may attend (bit r: verify row r): itself, its ancestors and
// the root.
TRT_SPEC_HD uint64_t tree_row_mask(const DraftTree& t, int node) {
  uint64_t bits = 1;  // the root
  for (int i = node; i >= 0; i = t.parent[i]) bits |= uint64_t{1} << tree_row(i);
  return bits;
}

// Makes node i of a chain, its last so far: parent i - 1, depth i + 1 (n = i + 1; untagged).
TRT_SPEC_HD void tree_set_chain_node(DraftTree& t, int i, int32_t token, uint8_t flags) {
  t.n = i + 1;
  if (i == 0) t.tag = 0;
  t.token[i] = token;
  t.parent[i] = static_cast<int8_t>(i - 1);
  t.depth[i] = static_cast<uint8_t>(i + 1);
  t.flags[i] = flags;
}

// What the children of verify row `row` are (accept.h tests them by kind; a dense child has no
// siblings, so one row's children are all of one kind).
enum RowChildren : int {
  kRowLeaf = 0,    // none: the walk can only stop here
  kRowOneHot = 1,  // deterministic tokens (prompt lookup)
  kRowDense = 2,   // the draft model's token, drawn from q
};
TRT_SPEC_HD int tree_row_children(const DraftTree& t, int row) {
  for (int i = 0; i < t.n; ++i)
    if (tree_row(t.parent[i]) == row) return (t.flags[i] & kNodeDense) ? kRowDense : kRowOneHot;
  return kRowLeaf;
}

// The deepest node among the first n (0 for none): the longest accepted run they allow.
TRT_SPEC_HD int tree_max_depth(const DraftTree& t, int n) {
  int d = 0;
  for (int i = 0; i < n; ++i) d = t.depth[i] > d ? t.depth[i] : d;
  return d;
}

}  // namespace trt_spec
