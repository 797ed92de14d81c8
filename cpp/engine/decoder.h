// decoder.h: the token loop of up to max_batch requests over a Runtime: prefill, then
// speculative iterations (SpecProgram) of all running sequences together.
//
// add() validates a request and gives it a free KV slot; each step() either prefills the
// requests added since the last step (each emits its first token) or runs one iteration for
// every running sequence and reports the tokens that became final, cut at stop tokens and
// max_new_tokens. A finished sequence frees its slot. The host reads the sequences' state
// back once per iteration; everything inside an iteration stays in backend memory.
//
// The prefill runs the prompt through the target (and, unless draft_len is 0, the draft).
// draft_len: -1 (auto) lets the DraftController pick k per iteration, 0 decodes target-only,
// k in [1, engine draft_len] drafts k tokens per iteration (less near max_seq_len or
// max_new_tokens, where more could not be used).
#pragma once

#include <algorithm>
#include <vector>

#include "spec/draft_controller.h"
#include "engine/request.h"
#include "engine/runtime.h"
#include "spec/spec_program.h"

namespace trt_spec {

// Per-request counters (reset by add()).
struct RequestStats {
  int iterations = 0;       // decode iterations (prefill excluded), drafting or not
  int spec_iterations = 0;  // iterations that drafted (k > 0)
  int drafted = 0, accepted = 0;
  int emitted = 0;                 // tokens kept from iterations (prefill's first token excluded)
  std::vector<int> accepted_hist;  // [max_k + 1]: drafting iterations by accepted length
  double prefill_s = 0.0, draft_s = 0.0, verify_s = 0.0, catch_up_s = 0.0;
};

class Decoder {
 public:
  explicit Decoder(Runtime& rt);

  int add(const GenerateRequest& req);  // the slot; throws InvalidArgument when none is free
  void set_draft_len(int k);            // for the following prefills and iterations (see above)
  int draft_len() const { return draft_len_; }

  struct Event {
    int slot;
    std::vector<int32_t> tokens;
  };
  std::vector<Event> step();
  void cancel(int slot);  // ends a running sequence now (its slot becomes free)

  bool running() const;  // any sequence not finished
  bool done(int slot) const { return slots_.at(slot).reason != StopReason::kNone; }
  StopReason stop_reason(int slot) const { return slots_.at(slot).reason; }
  const RequestStats& stats(int slot) const { return slots_.at(slot).stats; }
  int generated(int slot) const { return slots_.at(slot).generated; }
  int context_len(int slot) const { return slots_.at(slot).seq.n_past; }
  double acceptance_estimate(int slot) const { return slots_.at(slot).est.alpha(); }

  // The last iteration: its batch size, draft length and phase times.
  int last_batch() const { return last_B_; }
  int last_k() const { return last_k_; }
  const PhaseTimes& last_times() const { return last_times_; }
  const DraftController& controller() const { return controller_; }
  SpecProgram& program() { return program_; }

 private:
  struct Slot {
    bool used = false, prefilled = false;
    StopReason reason = StopReason::kNone;
    GenerateRequest req;
    std::vector<int32_t> tokens;  // prompt + generated (the draft catches up from it)
    int generated = 0;            // tokens emitted
    int draft_valid = 0;          // positions [0, draft_valid) are in the draft's cache
    SeqState seq;                 // host copy, read back after each iteration
    AcceptanceEstimate est;
    RequestStats stats;
    // Tokens the draft has still to read before it can draft (the iteration feeds n_past - 1).
    int draft_lag() const { return std::max(0, seq.n_past - 1 - draft_valid); }
  };
  std::vector<int32_t> prefill(int slot);
  void catch_up_draft(Slot& s, int slot);
  void forward_rows(Model& m, const int32_t* tokens, int n, int first_pos, int slot,
                    bool want_logits);
  int choose_k(const std::vector<int>& active);
  // Appends an emitted token to the slot; false once the request is finished.
  bool emit(Slot& s, int32_t tok, std::vector<int32_t>& out);

  Runtime& rt_;
  SpecProgram program_;
  DraftController controller_;
  int draft_len_ = -1;
  std::vector<Slot> slots_;
  std::vector<int32_t> program_slots_;  // the slots run(B, k) was last set up for
  int last_B_ = 0, last_k_ = 0;
  PhaseTimes last_times_;
  BackendBuffer tok_, pos_, row_slot_, rows_, logits_, sampled_;  // prefill and catch-up rows
};

}  // namespace trt_spec
