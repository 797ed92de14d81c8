// eagle3_rows.h: the row metadata of an EAGLE-3 head's forwards (eagle3_proposer.h), for the CPU
// and the CUDA kernels alike (plain C++, host and device).
//
// The head at position p reads the token at p + 1 and a feature of position p (the target's taps
// there, through fc; or, in a chain, its own previous output) and predicts the token at p + 2.
// After acceptance it absorbs the accepted path: for a sequence that accepted a nodes, rows
// j = 0 .. a are the path's verify rows (0: the root, j: node path[j - 1]) at positions
// n_past - a - 1 + j, reading the emitted tokens out[j]; it writes its cache there, so that its
// cache holds every position the target's does. A chain step j (0-based) makes node j of the
// sequence's tree from the head's best token and lays out the row that proposes node j + 1: that
// token at position n_past + j.
#pragma once

#include <cstdint>

#include "spec/seq_state.h"

namespace trt_spec {

// Row metadata of the head's rows (backend memory): tokens, positions, KV slots and the rows of
// the target's taps they read (absorb only).
struct Eagle3Rows {
  int32_t* tokens = nullptr;
  int32_t* pos = nullptr;
  int32_t* slot = nullptr;
  int32_t* src = nullptr;
};

// Absorb row j (0 .. k) of batch row b (slot `slot`) after acceptance, k the verify pass's draft
// length: rows past the accepted path repeat its last row (the same cache entry, rewritten).
TRT_SPEC_HD void eagle3_absorb_row(const SeqState& s, int32_t slot, int b, int j, int k,
                                   int max_seq, int32_t& tok, int32_t& pos, int32_t& row_slot,
                                   int32_t& src) {
  const int a = s.n_acc < k ? s.n_acc : k;
  const int i = j < a ? j : a;
  const int p = s.n_past - a - 1 + i;
  tok = s.out[i];
  pos = p < max_seq - 1 ? p : max_seq - 1;
  row_slot = slot;
  src = b * (k + 1) + (i == 0 ? 0 : tree_row(s.path[i - 1]));
}

// The absorbed row of batch row b whose output the next proposal reads (the path's last).
TRT_SPEC_HD int eagle3_last_row(const SeqState& s, int b, int k) {
  return b * (k + 1) + (s.n_acc < k ? s.n_acc : k);
}

// Chain step j: node j of s's tree is `token` (one-hot: the target's own draw accepts it or
// not); the row proposing node j + 1 reads it at position n_past + j.
TRT_SPEC_HD void eagle3_chain_node(SeqState& s, int32_t slot, int j, int max_seq, int32_t token,
                                   int32_t& tok, int32_t& pos, int32_t& row_slot) {
  tree_set_chain_node(s.tree, j, token, 0);
  const int p = s.n_past + j;
  tok = token;
  pos = p < max_seq - 1 ? p : max_seq - 1;
  row_slot = slot;
}

}  // namespace trt_spec
