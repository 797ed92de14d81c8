// proposer.h: a source of draft tokens. A new draft method is a new Proposer (its own files) and
// one line in the registry (proposer_registry.cpp): the scheduler, the iteration program
// (iteration.h) and the launch planner call these hooks and know nothing else of it.
//
// A proposer serves one public draft source (DraftSource: "model" is the engine's draft,
// whatever its kind; "lookup" is prompt lookup). Life of a request in KV slot `slot`:
//   begin(slot, admission)       the request takes the slot, before its prefill (an automatic
//                                request the proposer may decline, now or for a while)
//   prompt_done(slot, ..)        a prefill chunk's rows of the prompt went through the target
//   start(slot, seq)             the prompt is complete: the sequence's device state is made
//   then, per iteration of the decoding sequences:
//     before_iteration(slot, ..) host-issued work that must precede the choice (a prompt read
//                                left from the prefill)
//     offer(query)               what it proposes for the batch: size, tokens, seconds
//     prepare(seqs)              work before an iteration that uses it, for the sequences that
//                                may use it, outside the iteration graph (the draft model's
//                                catch-up: one forward for them all), timed
//     issue_propose(ctx, k)      device ops that fill each sequence's tree (seq_state.h) with up
//                                to k nodes, inside the graph
//     issue_after_accept(ctx)    device ops after acceptance, every iteration (prompt lookup
//                                computes the next proposal here)
//     observe_iteration(cost)    what the iteration cost (whichever source ran)
//     commit(slot, seq, used)    host bookkeeping from the state read back after the iteration
//     after_iteration(slot, ..)  the sequence goes on: a proposer waiting to join may join
//   end(slot)                    the request is gone
// active(slot) says, at any time, whether the slot's sequence may use the proposer now (the
// scheduler keeps SeqState::sources in step with it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "format/engine_file.h"
#include "model/model.h"
#include "spec/draft_tree.h"
#include "spec/seq_state.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class DraftController;

// What the device ops of one iteration work on (backend memory).
struct IterationContext {
  Backend& be;
  const SpecState& st;
  const int32_t* slots;  // [B]
  int B;
  RowBuffers rows;          // [max_batch (max_k + 1)] row metadata
  const int32_t* identity;  // 0, 1, 2, .. (logit rows)
  const int32_t* odd;       // 1, 3, 5, ..
  float* q;                 // [max_k, max_batch, vocab_draft]: the draft model's logits -> q
  int vocab_draft;          // 0 without a draft model
  // After acceptance (issue_after_accept), for proposers that read them (reads_hidden): the
  // verify pass's final hidden states [B, k + 1, dim] (rows as its logits), k its draft length;
  // null where no verify pass ran (a sequence's start).
  const float* hidden = nullptr;
  int k = 0;
  // After acceptance: a verify pass ran (false: a sequence's start, Iteration::start). Its rows'
  // target taps (Model::set_taps) are rows [0, B (k + 1)) of the taps, as its logits.
  bool verified = false;
  // Where the verify pass applies penalties (Iteration::set_penalties_on), a draft that samples
  // its nodes applies them to its step j's logits [B, stride] (ids [0, vocab)) first
  // (SpecOps::penalize_draft); null otherwise.
  std::function<void(float* logits, int j, int stride, int vocab)> penalize_draft;
  // Where the verify pass applies token masks and the backend runs on the host, a draft that
  // draws its chain step by step masks step j's logits [B, stride] (columns [0, n): token ids[c],
  // or c where ids is null) with the grammar after its nodes [0, j), after the penalties
  // (Iteration::set_draft_masker); null otherwise.
  std::function<void(float* logits, int j, int stride, int n, const int32_t* ids)> mask_draft;
  // Where mask_draft is set: true where the grammar allows every sequence exactly one token at
  // step j (after its nodes [0, j)), all of them ids in [0, vocab), written to tokens [B]: a
  // draft need not compute that step's logits.
  std::function<bool(int j, int vocab, int32_t* tokens)> forced_draft;
};

// A request as it takes its slot.
struct Admission {
  const std::vector<int32_t>& prompt;
  int cached = 0;          // prompt positions [0, cached) the slot's target cache still holds
  int copy_from = -1;      // >= 0: they were copied from this slot's (a live sequence sharing
                           // the prefix) target cache; -1: the slot's previous request left them
  bool allowed = false;    // the request allows this proposer's source
  bool automatic = false;  // draft="auto" and draft_len="auto": the proposer may decline
  bool others = false;     // the request allows other draft sources too
  int batch = 1;           // the batch it will decode in (slots taken and requests queued)
  int new_tokens = 0;      // the most tokens it can generate
};

// One decoding sequence, as offers see it.
struct OfferSeq {
  int slot = 0;
  const SeqState* seq = nullptr;  // its state after the last iteration
  int max_nodes = 0;              // the request's cap on draft nodes per iteration
  int32_t sources = 0;            // the draft sources it may use now (bits draft_source_bit)
  bool uses(const class Proposer& p) const;
};

// A sequence of the next iteration that may use the proposer (prepare()).
struct PrepareSeq {
  int slot = 0;
  const std::vector<int32_t>* tokens = nullptr;  // the sequence so far (prompt, generated, last)
  const SeqState* seq = nullptr;                 // its state after the last iteration
};

// The decoding sequences of the next iteration.
struct OfferQuery {
  std::vector<OfferSeq> seqs;  // [B]
  int limit = 0;               // the most nodes any iteration may draft now (>= 1)
  bool compact = false;        // the verify pass skips padding rows (Iteration::skips_padding)
  int B() const { return static_cast<int>(seqs.size()); }
};

// What a proposer offers for one iteration of the query's sequences.
struct Offer {
  int k = 0;                   // nodes per sequence; 0: nothing to offer
  double tokens = 0.0;         // expected tokens emitted (all B sequences)
  double seconds = -1.0;       // predicted device time of the iteration (<= 0: not known)
  bool probe = false;          // the cost is unknown: run it to measure it
  bool weighed_plain = false;  // the proposer already weighed k against a plain step
};

// The device time of an iteration that ran, as its proposers learn it (source: what ran).
struct IterationCost {
  DraftSource source = DraftSource::kNone;
  int B = 0, k = 0;
  double total_s = 0.0;  // the iteration's own time (a carried prefill chunk's share left out)
  double draft_s = 0.0, verify_s = 0.0;
  int rows = -1;  // verify rows its pass computed (< 0: B (k + 1))
};

// A sequence that goes on after an iteration (Proposer::after_iteration).
struct AfterIteration {
  const SeqState& seq;
  const std::vector<int32_t>& tokens;  // prompt and every token so far, `last` included
  int B = 0;                           // the iteration's batch
  double seconds = 0.0;                // the iteration's own device time
  int tokens_left = 0;                 // the most tokens the request may still emit
  bool warm_up = false;                // its times hold one-time work (iteration.h)
};

// What an engine's proposers are made from (proposer_registry.cpp).
struct ProposerOptions {
  int draft_window = 0;      // SchedulerOptions::draft_window
  int draft_read_chunk = 0;  // SchedulerOptions::draft_read_chunk
  int eagle_topk = 1;        // SchedulerOptions::eagle_topk
};
class Proposer;
struct ProposerEnv {
  Backend& be;
  const EngineFile& file;  // the engine (a proposer's own weights: its draft heads)
  Model& target;
  Model* draft;  // the engine's draft model (null: none)
  int max_batch = 0, max_k = 0;
  ProposerOptions opts;
  const std::vector<std::unique_ptr<Proposer>>& made;  // the proposers made before, in order
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual DraftSource source() const = 0;
  int32_t source_bit() const { return draft_source_bit(source()); }
  // Whether its drafts can branch (siblings at one position). Chains only (false): every accepted
  // node's cache entry is already at its position, so the iteration moves none (no kv_copy).
  virtual bool proposes_trees() const { return true; }
  // Whether it reads the target's final hidden states (IterationContext::hidden).
  virtual bool reads_hidden() const { return false; }

  // Requests. After begin(), active() says whether the request uses the proposer (an automatic
  // one it may decline, or join later).
  virtual void begin(int slot, const Admission& a) {}
  virtual bool active(int slot) const { return true; }
  // Whether the proposer declined the slot's request (statistics).
  virtual bool declined(int slot) const { return false; }
  // Prompt rows [first, first + n) of the slot's prompt went through the target (a prefill
  // chunk; the prompt is complete when first + n == prompt.size()); others_decoding: other
  // sequences decode meanwhile. Their target taps (Model::set_taps) are rows [row, row + n) of
  // the taps, until the target's next forward.
  virtual void prompt_done(int slot, const std::vector<int32_t>& prompt, int first, int n, int row,
                           bool others_decoding) {}
  // The sequence's first device state, before it is uploaded (fields of its own).
  virtual void start(int slot, SeqState& seq) {}
  // tokens: the sequence so far (prompt, generated, `last`).
  virtual void before_iteration(int slot, const std::vector<int32_t>& tokens) {}
  virtual void after_iteration(int slot, const AfterIteration& a) {}
  virtual void end(int slot) {}

  // Offers. offer(): the best k of its own choosing; offer_fixed(): exactly k (every request
  // fixed its draft length). Sequences whose sources lack source_bit() take no part.
  virtual Offer offer(const OfferQuery& q) { return {}; }
  virtual Offer offer_fixed(const OfferQuery& q, int k) { return {}; }
  // Seconds that `tokens` tokens emitted by an iteration that does not use this proposer cost
  // it later (the draft model's catch-up), charged to every other offer; 0: nothing.
  virtual double charge(const OfferQuery& q, double tokens) const { return 0.0; }
  // Predicted device time of an iteration of B sequences with k nodes from this proposer, or of a
  // plain step (k = 0) where it measures those (<= 0: unknown). prior: cross-B priors allowed.
  virtual double predicted_time(int B, int k, bool prior = true) const { return -1.0; }
  // The controller that measures the target's verify passes, for proposers that price
  // theirs on it (prompt lookup on the draft model's); null: none.
  virtual const DraftController* verify_costs() const { return nullptr; }
  virtual void observe_iteration(const IterationCost& c) {}

  // Iterations.
  virtual void prepare(const std::vector<PrepareSeq>& seqs) {}
  virtual void issue_propose(IterationContext& ctx, int k) {}
  virtual void issue_after_accept(IterationContext& ctx) {}
  // used: this iteration's tree came from this proposer.
  virtual void commit(int slot, const SeqState& seq, bool used) {}
  // Tokens the text will certainly continue with (a grammar's forced tokens), before the choice
  // of the next iteration: a proposer may offer them as its proposal, updating seq (the host's
  // copy of the slot's state) as it updates the device's.
  virtual void certain(int slot, const std::vector<int32_t>& tokens, SeqState& seq) {}
  // Device seconds of the slot's share of the prepare() work for the last iteration (0: none),
  // timed with a backend timer: read them after the iteration's read-back, which is when they
  // are known.
  virtual double take_prepare_seconds(int slot) { return 0.0; }
  // The backend synchronised: timers of work issued before it can be read.
  virtual void synchronised() {}
};

inline bool OfferSeq::uses(const Proposer& p) const {
  return (sources & p.source_bit()) != 0;
}

}  // namespace trt_spec
