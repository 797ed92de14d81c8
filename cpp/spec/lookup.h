// lookup.h: prompt lookup (n-gram) drafting, the rule shared by the CPU op and the CUDA kernel
// (plain C++, host and device).
//
// The sequence's text so far h[0, len) (prompt, generated tokens and the newest token `last`,
// len = n_past + 1) ends with an n-gram; earlier occurrences of it, in h itself or in the
// caller's predicted output (OpenAI's Predicted Outputs: e.g. the file being edited), are
// followed by continuations the answer may well repeat. The proposal:
//   1. match:  for each end position e of a source, L(e) = the longest n <= kNgramMax with
//              src[e - n, e) == h[len - n, len) (lookup_match_len); in h only e <= len - 1
//              counts, so that a continuation h[e] exists and the suffix never matches itself;
//   2. select: best = the largest L(e) over both sources; nothing when best < kNgramMin. The
//              matches are the ends with L(e) == best: the prediction's in ascending e, then
//              h's most recent first, kMaxMatches in all;
//   3. tree:   the continuations src[e, e + kMaxDraftNodes) (up to the source's end) are merged
//              into a trie, each node counting the matches that pass through it; the nodes are
//              ordered by count (descending), then depth, then creation, and the first
//              max_nodes kept: a parent always comes before its children, so any prefix of the
//              proposal is a tree, and the first nodes are those most matches agree on. Nodes
//              taken from the prediction are flagged kNodePredicted.
// Proposals are one-hot (deterministic given the text), accepted by accept.h's one-hot rule.
// The CPU op runs lookup_propose_serial; the CUDA kernel finds the matches of steps 1-2 with a
// whole block (same set, same order) and builds the tree with lookup_build_tree in one thread.
#pragma once

#include <cstdint>

#include "spec/draft_tree.h"

namespace trt_spec {

// The n-gram lengths that may propose. A shorter match is right less often (a 1-gram's first
// node about a third of the time on code, a 4-gram's most of the time): the proposal's length
// (the tree's tag, DraftTree::tag) goes with it, and acceptance is estimated per length
// (lookup_proposer.h), so that the controller verifies as many of its nodes as pay, or none.
constexpr int kNgramMin = 1;
constexpr int kNgramMax = 4;
constexpr int kMaxMatches = 8;  // continuations merged into one tree
constexpr int kLookupTrieNodes = kMaxMatches * kMaxDraftNodes;

// One match: the continuation src[begin, end) (end: the source's end), from the prediction?
struct LookupMatch {
  const int32_t* src;
  int32_t begin, end;
  bool predicted;
};

// The longest n <= n_max such that src[e - n, e) == h[len - n, len).
TRT_SPEC_HD int lookup_match_len(const int32_t* src, int e, const int32_t* h, int len,
                                 int n_max = kNgramMax) {
  int n = 0;
  while (n < n_max && e - n - 1 >= 0 && len - n - 1 >= 0 && src[e - n - 1] == h[len - n - 1]) ++n;
  return n;
}

// Step 3: merges the matches' continuations into a trie and writes the max_nodes best nodes.
TRT_SPEC_HD void lookup_build_tree(const LookupMatch* matches, int n_matches, int max_nodes,
                                   DraftTree& out) {
  int32_t tok[kLookupTrieNodes];
  int16_t parent[kLookupTrieNodes], count[kLookupTrieNodes];
  uint8_t depth[kLookupTrieNodes], flags[kLookupTrieNodes];
  int n = 0;
  for (int mi = 0; mi < n_matches; ++mi) {
    const LookupMatch& m = matches[mi];
    int cur = -1;
    for (int j = 0; j < kMaxDraftNodes && m.begin + j < m.end; ++j) {
      const int32_t t = m.src[m.begin + j];
      int child = -1;
      for (int c = 0; c < n && child < 0; ++c)
        if (parent[c] == cur && tok[c] == t) child = c;
      if (child < 0) {
        if (n == kLookupTrieNodes) break;
        child = n++;
        tok[child] = t;
        parent[child] = static_cast<int16_t>(cur);
        count[child] = 0;
        depth[child] = static_cast<uint8_t>(j + 1);
        flags[child] = 0;
      }
      count[child] += 1;
      if (m.predicted) flags[child] |= kNodePredicted;
      cur = child;
    }
  }
  // Selection by (count desc, depth asc, index asc): repeatedly take the best node not taken.
  int16_t new_index[kLookupTrieNodes];
  for (int c = 0; c < n; ++c) new_index[c] = -1;
  if (max_nodes > kMaxDraftNodes) max_nodes = kMaxDraftNodes;
  int taken = 0;
  while (taken < max_nodes) {
    int best = -1;
    for (int c = 0; c < n; ++c) {
      if (new_index[c] >= 0) continue;
      if (best < 0 || count[c] > count[best] || (count[c] == count[best] && depth[c] < depth[best]))
        best = c;
    }
    if (best < 0) break;
    new_index[best] = static_cast<int16_t>(taken);
    out.token[taken] = tok[best];
    // A parent has at least its child's count and a smaller depth: it was taken already.
    out.parent[taken] = static_cast<int8_t>(parent[best] < 0 ? -1 : new_index[parent[best]]);
    out.depth[taken] = depth[best];
    out.flags[taken] = flags[best];
    ++taken;
  }
  out.n = taken;
}

// Steps 1-3 serially: the proposal for the text h[0, len) and the prediction pred[0, m) (m may
// be 0) into out (at most max_nodes nodes; out.n = 0 when nothing matches). Returns the n-gram
// length behind it (0: none).
TRT_SPEC_HD int lookup_propose_serial(const int32_t* h, int len, const int32_t* pred, int m,
                                      int max_nodes, DraftTree& out) {
  out.n = 0;
  int best = 0;
  for (int e = 0; e < m; ++e) {
    const int l = lookup_match_len(pred, e, h, len);
    best = l > best ? l : best;
  }
  for (int e = 0; e < len; ++e) {
    const int l = lookup_match_len(h, e, h, len);
    best = l > best ? l : best;
  }
  if (best < kNgramMin || max_nodes <= 0) return 0;
  LookupMatch matches[kMaxMatches];
  int n = 0;
  for (int e = 0; e < m && n < kMaxMatches; ++e)
    if (lookup_match_len(pred, e, h, len) == best) matches[n++] = LookupMatch{pred, e, m, true};
  for (int e = len - 1; e >= 0 && n < kMaxMatches; --e)
    if (lookup_match_len(h, e, h, len) == best) matches[n++] = LookupMatch{h, e, len, false};
  lookup_build_tree(matches, n, max_nodes, out);
  return out.n > 0 ? best : 0;
}

}  // namespace trt_spec
