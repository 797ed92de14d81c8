// proposer.h: a source of draft tokens. A new draft method is a new Proposer: the iteration
// program (iteration.h) and the scheduler call these hooks and know nothing else of it.
//
// Life of a request in KV slot `slot`, as seen by a proposer:
//   begin(slot, prompt, cached) the request takes the slot (before its prefill; the draft
//                              model reads the prompt with the target's prefill chunks);
//                              cached: the prompt positions the slot's target cache still holds
//                              from the slot's previous request (the scheduler's prompt cache)
//   then, per iteration:
//     prepare(slot, ..)        work issued before an iteration that uses this proposer, outside
//                              the iteration graph (the draft model's catch-up), timed
//     issue_propose(ctx, k)    device ops that fill each sequence's tree (seq_state.h) with up
//                              to k nodes, inside the graph (draft model steps; nothing for
//                              lookup, whose tree is ready)
//     issue_after_accept(ctx)  device ops after acceptance, every iteration (prompt lookup
//                              computes the next proposal here)
//     commit(slot, seq, used)  host bookkeeping from the state read back after the iteration
//   end(slot)                  the request is gone
// Each proposer has its own draft-length controller (draft_controller.h, lookup_controller.h);
// the scheduler compares their offers.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "spec/draft_tree.h"
#include "spec/seq_state.h"
#include "spec/spec_ops.h"

namespace trt_spec {

// What the device ops of one iteration work on (backend memory).
struct IterationContext {
  Backend& be;
  SpecOps& ops;
  const SpecState& st;
  const int32_t* slots;  // [B]
  int B;
  RowBuffers rows;          // [max_batch (max_k + 1)] row metadata
  const int32_t* identity;  // 0, 1, 2, .. (logit rows)
  const int32_t* odd;       // 1, 3, 5, ..
  float* q;                 // [max_k, max_batch, vocab_draft]: the draft model's logits -> q
  int vocab_draft;          // 0 without a draft model
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual DraftSource source() const = 0;
  // Whether its drafts can branch (siblings at one position). Chains only (false): every accepted
  // node's cache entry is already at its position, so the iteration moves none (no kv_copy).
  virtual bool proposes_trees() const { return true; }

  // Positions [0, cached) of the prompt are in the target's cache already, left there as prompt
  // rows by the slot's previous request (whose prompt began with the same tokens): a proposer
  // with a cache of its own may keep what it holds of them.
  virtual void begin(int slot, const std::vector<int32_t>& prompt, int cached) {}
  // tokens: the sequence so far (prompt, generated, `last`); seq: its state after the last
  // iteration.
  virtual void prepare(int slot, const std::vector<int32_t>& tokens, const SeqState& seq) {}
  virtual void issue_propose(IterationContext& ctx, int k) {}
  virtual void issue_after_accept(IterationContext& ctx) {}
  // used: this iteration's tree came from this proposer.
  virtual void commit(int slot, const SeqState& seq, bool used) {}
  virtual void end(int slot) {}

  // Tokens this proposer has still to read before it can propose for the slot, whose target
  // cache holds n_past positions (the draft model's lag; 0 for proposers that need nothing).
  virtual int lag(int slot, int n_past) const { return 0; }
  // Device seconds of the slot's prepare() work for the last iteration (0: none), timed with a
  // backend timer: read them after the iteration's read-back, which is when they are known.
  virtual double take_prepare_seconds(int slot) { return 0.0; }
};

}  // namespace trt_spec
