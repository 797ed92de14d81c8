// draft_model_proposer.h: the draft model as a Proposer (proposer.h): k draft steps propose a
// chain, each token drawn from the draft's distribution q (kept for the exact acceptance test).
//
// The draft's cache: draft step 0 feeds the rows [prev, last] at positions n_past - 1, n_past
// (after a rejection position n_past - 1 already holds prev, an idempotent write; after a fully
// accepted chain, a plain target step or another proposer's iteration it is the one token the
// draft has not read), so before an iteration the draft must hold positions [0, n_past - 1).
// The prompt is read with the target's prefill (read_prompt, timed the same way and read by
// synchronised(): the controller's price of a read); tokens emitted by
// iterations that did not use the draft are read by prepare() (the catch-up: one draft forward
// over the rows every sequence of the iteration lags), timed on the device with a backend timer
// (Backend::Timer) and read after the iteration's read-back (take_prepare_seconds, each
// sequence's share by its rows): the controller learns a forward's seconds by its rows without a
// synchronisation of its own. Whether a fully automatic request uses the draft at all, now or once
// its first tokens say it pays, is decided here too (begin, after_iteration; draft_controller.h
// prices it), and the draft's offers come from its controller. Per slot it keeps draft_valid
// (positions [off, draft_valid) are in the draft's cache; off: below) and the sequence's acceptance
// estimate.
//
// A prompt window (ProposerOptions::draft_window = w > 0) has the draft read only the last w prompt
// rows it would read (positions [off, P - 1), off = max(0, P - 1 - w)): a long prompt costs the
// draft w rows, not P - 1. Its cache holds the sequence from position off on at draft positions 0,
// 1, .. (SeqState::draft_off = off, spec_draft_pos): the draft attends to the window as to a whole
// sequence. (Keeping the prompt's first rows too, StreamingLLM's "attention sinks", did not raise
// the acceptance: benchmarks/results/HISTORY.md.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "model/model.h"
#include "spec/draft_controller.h"
#include "spec/draft_model_ops.h"
#include "spec/proposer.h"

namespace trt_spec {

class DraftModelProposer : public Proposer {
 public:
  DraftModelProposer(Backend& be, Model& draft, int max_batch, int max_k, int vocab_target,
                     ProposerOptions opts = {});

  DraftSource source() const override { return DraftSource::kModel; }
  bool proposes_trees() const override { return false; }  // chains
  void begin(int slot, const Admission& a) override;
  bool active(int slot) const override { return slots_[slot].mode == Mode::kActive; }
  bool declined(int slot) const override;
  void prompt_done(int slot, const std::vector<int32_t>& prompt, int first, int n, int row,
                   bool others_decoding) override;
  void start(int slot, SeqState& seq) override { seq.draft_off = slots_[slot].off; }
  void before_iteration(int slot, const std::vector<int32_t>& tokens) override;
  void after_iteration(int slot, const AfterIteration& a) override;
  void end(int slot) override;

  Offer offer(const OfferQuery& q) override;
  Offer offer_fixed(const OfferQuery& q, int k) override;
  double charge(const OfferQuery& q, double tokens) const override;
  double predicted_time(int B, int k, bool prior = true) const override {
    return controller_.predicted_time(B, k, prior);
  }
  const DraftController* verify_costs() const override { return &controller_; }
  void observe_iteration(const IterationCost& c) override;

  void prepare(const std::vector<PrepareSeq>& seqs) override;
  void issue_propose(IterationContext& ctx, int k) override;
  void commit(int slot, const SeqState& seq, bool used) override;
  double take_prepare_seconds(int slot) override;
  // The device time of the prompt reads issued so far, to the controller.
  void synchronised() override;

  // Tokens the draft has still to read before it can propose for the slot, whose target cache
  // holds n_past positions (its lag).
  int lag(int slot, int n_past) const;
  // Runs prompt rows [first_pos, first_pos + n) of the slot through the draft (prefill chunks,
  // in order; positions past P - 1 are left to the first iteration); with a prompt window, only
  // those in it.
  void read_prompt(int slot, const int32_t* tokens, int first_pos, int n);

  int prompt_window() const { return opts_.draft_window; }
  // The prompt rows the draft reads of a prompt of prompt_len tokens.
  int prompt_rows_for(int prompt_len) const;
  // The slot's SeqState::draft_off: the window's start (0: none), its draft position 0.
  int draft_off(int slot) const { return slots_[slot].off; }
  // Prompt rows read so far (all slots).
  int64_t prompt_rows_read() const { return prompt_rows_read_; }

  DraftController& controller() { return controller_; }
  const DraftController& controller() const { return controller_; }
  double alpha(int slot) const { return slots_[slot].est.alpha(); }
  Model& model() { return draft_; }

  // An automatic request that waits to join decides after this many tokens.
  static constexpr int kDeferTokens = 12;

 protected:
  // The draft's positions [off, this) that hold the sequence after an iteration that drafted
  // with it (seq: the state read back): a chain's steps wrote every accepted node's entry.
  virtual int valid_after(const SeqState& seq) const { return seq.n_past - 1; }

  Backend& be_;
  Model& draft_;
  std::unique_ptr<DraftModelOps> ops_;
  int vocab_common_;

 private:
  // A request's use of the draft: not allowed; drafting; declined at admission (its prompt read
  // would not pay); waiting to join (the read pays against plain steps, maybe not against prompt
  // lookup: after_iteration decides); reading its prompt a piece per step (draft_read_chunk).
  enum class Mode { kOff, kActive, kDeclined, kDeferred, kReading };
  struct SlotState {
    Mode mode = Mode::kOff;
    int draft_valid = 0;  // positions [off, draft_valid) are in the draft's cache
    int off = 0;          // the prompt window's start (0: none)
    // Without a window: positions [0, prompt_read) hold the prompt, read as prompt rows (a
    // catch-up's rows are decode rows, with other bits); at end(), what the next request of the
    // slot may keep (prompt_kept) of the positions the target keeps.
    int prompt_read = 0;
    int prompt_kept = 0;
    // Prompt rows [read_first, read_first + read_n) left to read: the last prefill chunk's
    // (and, with a prompt window, the window's rows that a prefill alone left), read at the next
    // step so that the first token reaches the caller without waiting for the draft.
    int read_first = 0, read_n = 0;
    // kDeferred: the seconds and tokens of its iterations so far, [0] plain steps, [1] others'.
    double deferred_s[2] = {0.0, 0.0};
    int deferred_tokens[2] = {0, 0};
    AcceptanceEstimate est;
    // The last proposal skipped forced steps (propose_skipping_forced): its nodes [0, fed) were
    // fed to the draft (-1: every node but the last, as a chain's steps feed them).
    int fed = -1;
  };
  // The rows read_prompt(slot, .., 0, upto) reads.
  int rows_up_to(int slot, int upto) const { return std::max(0, upto - slots_[slot].off); }
  // Sequences of the query that may use the draft: their acceptance estimates (0 for the
  // others), and the tokens they lag in all; false when none may.
  bool alphas(const OfferQuery& q, std::vector<double>& a, int* lags) const;
  // issue_propose under a grammar on the host (IterationContext::forced_draft): a step whose
  // token the grammar forces for every sequence runs no forward; its row joins the next one's.
  void propose_skipping_forced(IterationContext& ctx, int k);
  // n rows through the draft (chunks of its max_rows): tokens, draft positions and slots [n];
  // prompt: the rows read the prompt (Rows::prompt_from; a catch-up's rows do not).
  void forward_rows(const int32_t* tokens, const int32_t* pos, const int32_t* slots, int n,
                    bool prompt);

  ProposerOptions opts_;
  DraftController controller_;
  std::vector<SlotState> slots_;
  struct TimedRows {  // draft rows issued (a catch-up or a prompt read), their time not read yet
    int rows = 0;
    std::unique_ptr<Backend::Timer> timer;
  };
  // forward_rows between a timer's start and stop (device time, read after a later
  // synchronisation).
  TimedRows timed_forward(const int32_t* tokens, const int32_t* pos, const int32_t* slots, int n,
                          bool prompt);
  std::unique_ptr<Backend::Timer> take_timer();
  void drop_catch_up();  // (one whose time was never read)

  BackendBuffer tok_, pos_, row_slot_;  // forward_rows' rows [max_rows]
  BackendBuffer last_rows_;             // [max_batch] propose_skipping_forced's logit rows
  struct CatchUp {
    TimedRows forward;                       // its rows: those of every share
    std::vector<std::pair<int, int>> share;  // (slot, rows) not taken yet
    double seconds = -1.0;                   // the forward's, once read
  } catch_up_;
  std::vector<TimedRows> reads_;  // prompt reads
  int64_t prompt_rows_read_ = 0;
  std::vector<std::unique_ptr<Backend::Timer>> spare_timers_;
};

// The registry's factory: the engine's draft model, where it has one and a draft length.
std::unique_ptr<Proposer> make_draft_model_proposer(const ProposerEnv& env);

}  // namespace trt_spec
