// seq_state.h: the state of one sequence during speculative decoding, kept in backend memory and
// read back by the host once per iteration, and its random numbers (plain C++, host and device).
//
// One iteration, for a sequence whose caches hold positions [0, n_past) and whose newest token
// `last` is not yet in them:
//   propose: a draft tree of up to k nodes (draft_tree.h) from one source: made by its
//            proposer's ops (the draft model's chain), or left ready in the state at the end of
//            the previous iteration (prompt lookup's tree, ready_n nodes);
//   verify:  the target scores the root and every node in one pass (k + 1 rows);
//   accept:  the walk of accept.h keeps a path of nodes and emits one more token (a correction
//            or a bonus), so every emitted token is distributed exactly as target-only decoding
//            would draw it;
//   commit:  n_past += accepted + 1; the accepted nodes' cache entries move to their positions;
//            stale entries past n_past are never read and get overwritten.
//
// Random numbers: every draw for the token at generation index m uses
// philox_uniform(seed, m, lane, stream) with one stream per purpose, so each uniform is used by
// exactly one decision, a request's draws depend on its seed only (not on its slot or batch),
// and CPU and GPU draw the same numbers.
#pragma once

#include <cstdint>

#include "kernels/philox.h"
#include "kernels/sampling.h"
#include "spec/draft_tree.h"

namespace trt_spec {

// The longest draft an engine may be built with (tree nodes per sequence per iteration).
constexpr int kMaxDraftLen = kMaxDraftNodes;

// RNG streams (the last Philox counter word).
enum RngStream : uint32_t {
  kStreamTarget = kSampleStream,  // a token drawn by the sampling rule (target-only, the bonus)
  kStreamDraft = 1,               // draft model proposal d_j ~ q_j
  kStreamAccept = 2,              // the acceptance test of a draft model's token
  kStreamResidual = 3,            // the token drawn from the residual after it was rejected
};

// Per-sequence state in backend memory, indexed by KV slot.
struct SeqState {
  // Set by the host when the request starts.
  int32_t sources = 0;    // allowed draft sources: bits draft_source_bit(DraftSource)
  int32_t max_nodes = 0;  // the request's cap on draft nodes per iteration
  int32_t pred_len = 0;   // tokens of the caller's predicted output (prompt lookup reads them)
  int32_t draft_off = 0;  // the draft model reads the sequence from this position on (its prompt
                          // window): its positions are the target's less draft_off
  // Advanced by every iteration.
  int32_t n_past = 0;  // positions [0, n_past) hold this sequence in the target's KV cache
  int32_t last = 0;    // newest token, not in the caches yet (history[n_past])
  int32_t prev = 0;    // the token at position n_past - 1
  int32_t n_gen = 0;   // tokens generated so far: the generation index of the next token
  // The last iteration.
  int32_t source = 0;     // its DraftSource for this sequence (kNone when it proposed nothing)
  int32_t n_new = 0;      // tokens emitted (accepted + 1)
  int32_t n_acc = 0;      // draft tokens accepted
  int32_t n_drafted = 0;  // nodes proposed (tree.n)
  int32_t depth = 0;      // the longest path the tree offered (its deepest node)
  int32_t pred_acc = 0;   // accepted nodes copied from the predicted output
  int32_t pred_rej = 0;   // proposed nodes copied from it and not accepted
  int32_t ready_n = 0;    // nodes a proposer left ready in `tree` for the next iteration (prompt
                          // lookup, after acceptance; 0: none); tree.tag is theirs
  int32_t last_tag = 0;   // the last iteration's tree's tag (DraftTree::tag; 0: no nodes)
  DraftTree tree;         // this iteration's proposal (or the next one, made ready after accept)
  int32_t out[kMaxDraftNodes + 1] = {};  // tokens emitted by the last iteration
  int32_t path[kMaxDraftNodes] = {};     // the accepted nodes, by depth
};

// The uniform number behind a draw for generation index m of a request.
TRT_SPEC_HD float spec_uniform(uint64_t seed, int64_t m, RngStream stream, uint32_t lane = 0) {
  return philox_uniform(seed, static_cast<uint64_t>(m), lane, static_cast<uint32_t>(stream));
}

// The generation index of the token drawn at verify row `row` of s's tree (the root's: n_gen).
TRT_SPEC_HD int64_t spec_row_gen_index(const SeqState& s, int row) {
  return s.n_gen + (row == 0 ? 0 : s.tree.depth[row - 1]);
}

// The verify row (of the sequence's k + 1) at which the last iteration drew its d-th emitted
// token (d < n_new): the root's for d = 0, else the accepted node path[d - 1]'s.
TRT_SPEC_HD int spec_emitted_row(const SeqState& s, int d) {
  return d == 0 ? 0 : 1 + s.path[d - 1];
}

// The draft model's position of target position `pos` (RoPE sees relative positions only, so a
// draft that read a window of the prompt attends to it as if the window began the sequence).
TRT_SPEC_HD int32_t spec_draft_pos(const SeqState& s, int32_t pos) {
  return pos - s.draft_off;
}

// Rolls a sequence forward after acceptance: out[0 .. accepted] emitted, of which the first
// `accepted` are the tree nodes path[0 .. accepted).
TRT_SPEC_HD void spec_commit(SeqState& s, int accepted) {
  const int32_t before_last = accepted == 0 ? s.last : s.tree.token[s.path[accepted - 1]];
  int pred_acc = 0, pred_all = 0;
  for (int d = 0; d < accepted; ++d) pred_acc += (s.tree.flags[s.path[d]] & kNodePredicted) ? 1 : 0;
  for (int i = 0; i < s.tree.n; ++i) pred_all += (s.tree.flags[i] & kNodePredicted) ? 1 : 0;
  s.n_drafted = s.tree.n;
  s.last_tag = s.tree.n > 0 ? s.tree.tag : 0;
  s.depth = tree_max_depth(s.tree, s.tree.n);
  s.pred_acc = pred_acc;
  s.pred_rej = pred_all - pred_acc;
  s.n_acc = accepted;
  s.n_new = accepted + 1;
  s.n_past += accepted + 1;
  s.n_gen += accepted + 1;
  s.prev = before_last;
  s.last = s.out[accepted];
}

}  // namespace trt_spec
