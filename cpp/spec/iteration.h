// iteration.h: one speculative iteration as a fixed program of device ops, and the sequences'
// state in backend memory.
//
// For B sequences (KV slots set by set_slots) and a choice (source, k), run() issues:
//   propose   the source's proposer fills each sequence's tree with up to k nodes
//             (the draft model: k draft steps; prompt lookup: nothing, its tree is ready)
//   verify    the tree rows [B, k + 1] through the target in one pass (tree attention)
//   accept    acceptance, emitted tokens, commit, history (spec_ops.h accept)
//   move      the accepted nodes' target cache entries to their positions (kv_copy)
//   next      every proposer's after-accept ops (prompt lookup's next tree)
// On a host backend the verify pass may also carry other sequences' prompt rows (carry(): a
// prefill chunk sharing the pass over the target's weights).
// k = 0 (source kNone) is a plain target step on the same path. Every input of every op is read
// from backend memory written by the previous op: the host only picks (source, k) and,
// afterwards, reads the SeqState array back once.
//
// Graphs: on a backend that supports them (CUDA), run() replays two graphs per (source, B, k),
// the proposal (propose, and the verify rows' layout) and the rest, captured the first time;
// capture() captures them ahead of time, so that no timed iteration ever includes a capture.
// set_use_graphs(false) issues the same ops one by one.
//
// Timing: every run() records its phases with backend timers (Backend::Timer: events on the
// stream on a GPU, the host clock on the CPU) before, between and after the two parts, never
// inside a captured graph, and without synchronising: times() reads them after read_states(),
// the iteration's one synchronisation. On an asynchronous backend the first run of each
// (source, B, k) is a warm-up (warm_up()): it may include one-time work (a graph's first
// launch uploads it, scratch grows), so its times are not the cost of that choice.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "spec/proposer.h"
#include "spec/spec_ops.h"

namespace trt_spec {

// Prompt rows (host memory) that a verify pass can carry (Iteration::carry): [n] tokens,
// positions and KV slots, and the rows among them whose logits are kept [n_logits].
struct PromptRows {
  std::vector<int32_t> tok, pos, slot;
  std::vector<int32_t> logit_rows;
  int size() const { return static_cast<int>(tok.size()); }
};

// Device time of an iteration's phases (backend timers).
struct PhaseTimes {
  double draft_s = 0.0;   // the proposal (draft steps) and the verify rows' layout
  double verify_s = 0.0;  // the verify pass, acceptance and the next proposals
  double total() const { return draft_s + verify_s; }
};

class Iteration {
 public:
  // draft may be null (no draft model). max_k: the engine's draft length (nodes).
  Iteration(Backend& be, Model& target, Model* draft, int max_batch, int max_k, int max_seq);

  // The proposer of each source (not owned); a source without one is never run. Set them before
  // the first run (one that reads hidden states makes every verify pass keep them).
  void set_proposer(DraftSource s, Proposer* p);
  Proposer* proposer(DraftSource s) const { return proposers_[static_cast<int>(s)]; }

  const SpecState& state() const { return st_; }
  int max_k() const { return max_k_; }

  // A new sequence in `slot`: its state, sampling state, history (the prompt and the first
  // token, positions [0, n_past]) and predicted output. Then every proposer's after-accept ops
  // run for it, so its first iteration finds the next proposals ready.
  void start(int slot, const SeqState& seq, const SamplingState& sampling,
             const std::vector<int32_t>& history, const std::vector<int32_t>& prediction);

  // Changes the draft sources a started sequence may use (SeqState::sources).
  void set_sources(int slot, int32_t sources);
  // Sets the sequences of the next iterations: rows b = 0 .. B-1 are slots[b].
  void set_slots(const int32_t* host_slots, int B);
  // Issues one iteration, its phases timed. Asynchronous on a GPU backend, unless `between` is
  // given: it runs on the host after the proposal (which it may read back: read_states) and
  // before the verify pass (constrained sequences' masks: upload_masks).
  void run(DraftSource source, int k, const std::function<void()>& between = {});
  // Captures the graphs of (source, B, k) now, if the backend has graphs and they are not
  // captured yet (a capture is host work: do it before timing anything).
  void capture(DraftSource source, int k);
  // Reads every slot's SeqState back (synchronises with the backend).
  void read_states(std::vector<SeqState>& out);
  // The last run()'s phases; read after read_states() (earlier, it would wait for them).
  PhaseTimes times();
  // Verify rows the last run()'s target pass computed, carried rows not counted: B * (k + 1),
  // or fewer where the pass skipped padding rows (below).
  int last_rows() const { return last_rows_; }
  // The last run() was the first of its (source, B, k) on an asynchronous backend: its times
  // may include one-time work and must not be taken as the cost of that choice.
  bool warm_up() const { return warm_up_; }

  // Prompt rows of other sequences (a prefill chunk) that the next run()'s verify pass carries:
  // the target writes their k and v beside the verify rows, in the same pass over its weights,
  // and keeps the logits of the carried rows listed in rows.logit_rows (indices into the
  // carried rows). For the next run() only, which drops them even if it throws. Only where run()
  // issues the ops one by one (can_carry(): a host backend; a captured graph has fixed rows), at
  // most carry_room(k) rows. The rows' bits are those of a separate forward (the kernels' results
  // do not depend on the other rows of a pass).
  //
  // Where the ops are issued one by one on a host backend (can_carry()), the verify pass also
  // skips the padding rows of sequences whose tree has fewer than k nodes (a sequence without
  // the source's proposals, or with fewer lookup nodes ready): only each sequence's root and
  // its tree's nodes go through the target, whose rows cost compute on a CPU; their logits are
  // then spread back to the [B, k + 1] layout acceptance reads (a padding row's logits are
  // never read: no node hangs below it).
  bool can_carry() const;
  int carry_room(int k) const;
  void carry(PromptRows rows);
  // The last run()'s carried logits [n_logits, vocab_t] (backend memory).
  const float* carried_logits() const { return carried_logits_; }
  // The row of the target's taps (Model::set_taps) where the last run()'s carried rows begin.
  int carried_row0() const { return carried_row0_; }

  // Whether the host path skips padding rows (above; on by default; off: for tests comparing).
  void set_skip_padding(bool on) { skip_padding_ = on; }
  bool skip_padding() const { return skip_padding_; }
  // Whether a run() with k > 0 issued one by one will skip them (the callers' pricing asks).
  bool skips_padding() const { return skip_padding_ && can_carry(); }

  // Whether the next iterations also compute the log-probabilities of every emitted token
  // (Backend::logprobs at the rows accept drew them from; each request's SamplingParams::logprobs
  // says how many top entries, or none). Graphs are captured per setting.
  void set_logprobs(bool on);
  bool logprobs() const { return logprobs_; }
  // Whether the next iterations apply the sequences' penalties (SpecOps::penalize before
  // acceptance, the counts after it); graphs are captured per setting.
  void set_penalties_on(bool on) { penalties_ = on; }
  // A sequence's penalties, before its first token is drawn (the first call allocates their
  // state: every slot inactive): its params and, where they are active, its prompt's tokens;
  // its counts start at zero (start() counts the first token).
  void set_penalties(int slot, const PenaltyParams& p, const std::vector<int32_t>& prompt);
  bool has_penalties() const { return pen_.params != nullptr; }
  // The penalties on n rows [n, vocab_t] of the sequences in row_slots (backend memory): the
  // prompts' last rows, before their first tokens are drawn.
  void penalize_rows(const int32_t* row_slots, int n, float* logits);
  // Whether the next iterations apply token masks (engine/constraint.h) to the verify logits
  // before acceptance: run()'s `between` step, after the proposal, uploads them
  // (upload_masks); graphs are captured per setting.
  void set_masks_on(bool on);
  // The grammar inside the draft, where masks are on and the backend runs on the host (each
  // draft step then waits for the last): fn(b, chain, row) fills row [mask_words()] with the
  // tokens allowed after sequence b's text and `chain` (its draft nodes so far) and returns
  // false where sequence b is unconstrained. Drafts that sample their chains step by step apply
  // it to each step's logits (IterationContext::mask_draft): they draft inside the grammar.
  using DraftMasker = std::function<bool(int b, const std::vector<int32_t>& chain, uint32_t* row)>;
  void set_draft_masker(DraftMasker fn) { draft_masker_ = std::move(fn); }
  // The last run()'s draft steps that the grammar forced for sequence b (drawn without logits).
  int forced_steps(int b) const { return b < static_cast<int>(forced_.size()) ? forced_[b] : 0; }
  int mask_words() const { return (vocab_t_ + 31) / 32; }
  // Masks of the next verify pass's rows, [B, k + 1, mask_words()] (host memory).
  void upload_masks(const std::vector<uint32_t>& masks);
  // In run()'s `between` step, where the verify pass skips padding rows (host memory): the
  // trees of `slots` become those of seqs[slot] (the proposal pruned: fewer verify rows), and
  // the verify rows are laid out again.
  void replace_trees(const std::vector<SeqState>& seqs, const std::vector<int>& slots);
  // Masks n rows of logits [n, vocab_t] (backend memory) with masks [n, mask_words()] (host
  // memory): the prompts' last rows, before their first tokens are drawn (n <= max_batch).
  void mask_rows(float* logits, int n, const std::vector<uint32_t>& masks);
  // The last run()'s log-probabilities (after read_states): [B, k + 1, kLogprobEntries], entry
  // (b, d) the d-th token sequence b emitted (those of sequences asking for none are stale).
  void read_logprobs(std::vector<TokenLogprob>& out);

  void set_use_graphs(bool on) { use_graphs_ = on; }
  bool use_graphs() const { return use_graphs_; }
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }
  bool has_graph(DraftSource source, int k) const;

 private:
  struct Graphs {
    std::unique_ptr<BackendGraph> propose, verify;  // null: the backend has no graphs
  };
  using Key = std::tuple<int, int, int, int>;  // (source, B, k, flags())
  int flags() const { return (logprobs_ ? 1 : 0) | (penalties_ ? 2 : 0) | (masks_ ? 4 : 0); }
  IterationContext context();
  // The draft's step masks (set_draft_masker), for the proposal's step j: rows [B, mask_words()]
  // and whether each sequence is constrained; computed once per step.
  struct StepMasks {
    int j = -1;
    std::vector<uint32_t> rows;
    std::vector<char> on;
  };
  const StepMasks& draft_step_masks(const int32_t* slots, int j);
  void mask_draft_step(const int32_t* slots, int j, float* logits, int stride, int n,
                       const int32_t* ids);
  bool forced_draft_step(const int32_t* slots, int j, int vocab, int32_t* tokens);
  void issue_propose(DraftSource source, int k);  // proposals and the verify rows [B, k + 1]
  // Verify (with `carried` rows after the verify rows, `carried_logits` of them kept), accept,
  // move, next.
  // `rows`: the verify rows laid out first (B * (k + 1), or fewer after compact_rows).
  void issue_verify(DraftSource source, int k, int rows, int carried, int carried_logits);
  // Moves the live verify rows (each sequence's root and tree nodes) to the front of the row
  // metadata, recording where each one's logits belong (live_dest_); returns their count.
  // Host memory only (can_carry()).
  int compact_rows(int k);
  // The carried rows' metadata after the first `first` rows, and the pass's logit rows.
  void upload_carried(const PromptRows& rows, int first);
  // The masks' buffer [max_batch (max_k + 1), mask_words()], made on first use.
  uint32_t* mask_buffer();

  Backend& be_;
  Model& target_;
  Model* draft_;
  std::unique_ptr<SpecOps> ops_;
  Proposer* proposers_[kDraftSourceCount] = {};
  int max_batch_, max_k_, max_seq_, B_ = 0;
  int vocab_t_, vocab_d_;
  SpecState st_;
  BackendBuffer seqs_, states_, history_, prediction_, slots_, start_slot_;
  BackendBuffer tok_, pos_, row_slots_, kv_idx_, tree_base_, tree_bits_;  // [max rows]
  BackendBuffer identity_, odd_;  // logit rows 0, 1, 2, .. and 1, 3, 5, ..
  BackendBuffer q_;               // draft logits -> q  [max_k, max_batch, vocab_d]
  BackendBuffer logits_;  // verify logits [max_batch, max_k + 1, vocab_t], then carried ones
  BackendBuffer hidden_;  // their final hidden states (a proposer reads them), [rows, dim_t]
  BackendBuffer carry_logit_rows_;  // [max rows] logit rows of a verify that carries rows
  PromptRows carry_;                // for the next run()
  const float* carried_logits_ = nullptr;
  int carried_row0_ = 0;
  std::vector<int32_t> live_dest_;  // [live rows] each compacted row's [B, k + 1] row
  int last_rows_ = 0;
  BackendBuffer mv_slot_, mv_src_, mv_dst_;  // [max_batch kMaxDraftNodes] cache moves
  bool use_graphs_ = true, warm_up_ = false, skip_padding_ = true, logprobs_ = false;
  bool penalties_ = false, masks_ = false;
  BackendBuffer mask_;  // (mask_buffer())
  DraftMasker draft_masker_;
  std::vector<int> forced_;  // [B] the last proposal's forced steps
  StepMasks step_masks_;
  PenaltyState pen_;  // (null until the first set_penalties)
  BackendBuffer pen_params_, pen_counts_, pen_prompt_;
  std::vector<char> pen_active_;  // [max_batch] the slots' params are active
  int last_k_ = 0;
  DraftSource run_source_ = DraftSource::kNone;  // run()'s, for replace_trees
  // Log-probabilities: each emitted token's row, token and slot [max_batch (max_k + 1)], and the
  // entries [max_batch (max_k + 1), kLogprobEntries] (allocated by the first set_logprobs(true)).
  BackendBuffer lp_rows_, lp_tok_, lp_slot_, lp_out_;
  std::map<Key, Graphs> graphs_;
  std::set<Key> ran_;  // (source, B, k) run at least once
  std::unique_ptr<Backend::Timer> draft_timer_, verify_timer_;
};

}  // namespace trt_spec
