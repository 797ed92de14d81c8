// scheduler.h: owns every request's life: queue, KV slots, chunked prefill interleaved with the
// other sequences' decoding, the speculative iterations, stops (token ids and strings),
// cancellation and statistics.
//
// submit() validates a request and queues it; each step():
//   1. ends cancelled requests (queued or running) and frees their slots;
//   2. admits queued requests, oldest first, into free KV slots (at most the engine's max_batch
//      run at once);
//   3. prefills: one chunk of prompt rows, taken from the prefilling requests oldest first
//      (prefill_chunk rows; while other sequences decode, as many rows as cost about one of
//      their iterations, at most interleave_chunk: engine/prefill_pacer.h, so that a long
//      prompt does not stall them, and on a host backend carried by their iteration's verify
//      pass, step 4); the proposers see the same rows (Proposer::prompt_done: the draft model
//      reads them, or declines or defers an automatic request, draft_model_proposer.h); a
//      request whose prompt is complete gets its first token;
//   4. runs one speculative iteration for every decoding sequence: the draft source and length
//      chosen from the proposers' offers, "no draft" (a plain target step) among them
//      (draft_choice.cpp), then the tokens that became final, cut at stop ids, stop strings and
//      max_new_tokens;
// and returns one event per request that produced something. A finished request's event
// carries its statistics, and the scheduler forgets it. Not thread-safe: one caller at a time
// (the Python Engine serialises them). The scheduler knows proposers only through proposer.h:
// which ones exist is the registry's (spec/proposer_registry.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/prefill_pacer.h"
#include "engine/request.h"
#include "engine/runtime.h"
#include "engine/stop_strings.h"
#include "spec/iteration.h"
#include "spec/proposer_registry.h"

namespace trt_spec {

// The default prompt window of the draft model (SchedulerOptions::draft_window).
constexpr int kDefaultDraftWindow = 0;
// The shortest prefix of a live sequence's prompt that a new request copies (or waits for)
// rather than prefilling it.
constexpr int kMinSharedPrefix = 32;
// The default of SchedulerOptions::draft_read_chunk: the draft reads a prompt with the target.
constexpr int kDefaultDraftReadChunk = 0;

struct SchedulerOptions {
  int prefill_chunk = 256;    // prompt rows per step while no other sequence decodes
  int interleave_chunk = 64;  // prompt rows per step while others decode, at most (PrefillPacer:
                              // fewer when rows are slow, so that decoders are not stalled)
  // While others decode, their iteration's verify pass carries the chunk (one pass over the
  // target's weights for both; Iteration::carry), where the backend allows (host backends).
  bool carry_prefill = true;
  // The draft model reads at most this many rows of a prompt, its end (0: all;
  // DraftModelProposer::set_prompt_window). With a window and nothing else decoding it reads them
  // after the first token, so that the draft does not add to the time to first token; while
  // others decode, as the prompt's chunks pass (chunk_done).
  int draft_window = kDefaultDraftWindow;
  // 0: the draft model reads a prompt's chunks as the target does (the last one after the first
  // token). N > 0: it reads the prompt (or its window) only after the request's first token, at
  // most N rows per decode step, while the request decodes without it (plain steps or prompt
  // lookup); then it catches up with the tokens generated meanwhile and drafts. The time to first
  // token is the target's prefill alone, and the draft still sees the whole prompt: the read's
  // cost moves to the first steps' inter-token latency instead (read_pending_prompts).
  int draft_read_chunk = kDefaultDraftReadChunk;
  // An EAGLE-3 head's proposals: 1: chains; w in [2, kEagle3MaxTopK]: dynamic trees expanding the
  // w best nodes of each depth (eagle3_tree.h).
  int eagle_topk = 1;
  // The prompt cache: a request takes the free slot whose cache still holds the longest prefix
  // of its prompt (left by the slot's previous request's prompt, as llama-server's cache_prompt)
  // and prefills only the rest; the draft model keeps what it read of that prefix. A live
  // sequence whose prompt shares a longer prefix (kMinSharedPrefix or more) has its prompt rows
  // copied instead (the drafts' too), once it has prefilled them. Only prompt rows are kept (a
  // generated token's row has a decode row's bits; a prompt row's may differ: prompt attention), so
  // the output is the same with the cache on or off.
  bool prompt_cache = true;
  // The text of each token id (UTF-8 bytes; empty for special tokens); stop strings need it.
  std::vector<std::string> token_bytes;
};

struct RequestStats {
  std::string draft;             // the request's draft source: auto, model, lookup or none
  std::optional<int> draft_len;  // the request's draft tokens per iteration (none: auto)
  int prompt_tokens = 0;
  int cached_tokens = 0;          // prompt tokens the prompt cache held (not prefilled)
  int iterations = 0;             // decode iterations the request took part in (prefill excluded)
  int spec_iterations = 0;        // ... that verified draft tokens for it
  int drafted = 0, accepted = 0;  // draft tokens verified / kept
  int emitted = 0;                // tokens emitted by iterations (not the prefill's first)
  int iterations_by_source[kDraftSourceCount] = {};
  int drafted_by_source[kDraftSourceCount] = {};
  int accepted_by_source[kDraftSourceCount] = {};
  int prediction_accepted = 0;     // draft tokens from the predicted output that were kept
  int prediction_rejected = 0;     // ... and that were verified and not kept
  int pruned = 0;                  // draft tokens a constraint forbade, removed before verification
  int forced = 0;                  // draft steps the constraint forced, drawn without the draft
  std::vector<int> accepted_hist;  // [max_k + 1]: drafting iterations by accepted length
  std::vector<int> accepted_hist_by_source[kDraftSourceCount];  // ... of each source's iterations
  std::string sources;               // per iteration: 'n' none, 'm' draft model, 'l' lookup
  bool draft_model_skipped = false;  // auto left the draft model out (its read would not pay)
  std::string prompt_attention;      // the products prompt rows attended with (Runtime's)
  double queue_s = 0.0;              // submission -> admission into a slot
  double prefill_s = 0.0;            // admission -> first token
  double draft_s = 0.0, verify_s = 0.0, catch_up_s = 0.0;  // of the iterations it took part in
  double ttft_s = 0.0, total_s = 0.0;                      // from submission
  std::vector<double> token_times;  // seconds from submission at which each token became final
};

struct SchedulerEvent {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // tokens that became final (a final stop token included)
  std::string text;             // output text that became final (UTF-8 bytes, maybe cut mid-char)
  // Per token of `tokens`, where the request asks for them (SamplingParams::logprobs >= 0): its
  // log-probability (entry 0), then its top candidates' (at most `logprobs`).
  std::vector<std::vector<TokenLogprob>> logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  RequestStats stats;  // when finished
};

class Scheduler {
 public:
  Scheduler(Runtime& rt, SchedulerOptions opts);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  uint64_t submit(GenerateRequest req);  // throws InvalidArgument for a bad request
  void cancel(uint64_t id);              // ends it at the next step (unknown ids: nothing)
  std::vector<SchedulerEvent> step();

  bool has_work() const { return !queue_.empty() || !live_.empty(); }
  // Forgets what the slots' caches hold (the prompt cache): for a caller about to write a
  // slot's cache itself (Runtime::prompt_logits borrows slot 0).
  void clear_prompt_cache() {
    for (std::vector<int32_t>& h : held_) h.clear();
  }
  int running() const;  // requests holding a slot
  int waiting() const { return static_cast<int>(queue_.size()); }
  const RequestLimits& limits() const { return limits_; }

  // The last iteration, for tests and benchmarks.
  int last_batch() const { return last_B_; }
  int last_k() const { return last_k_; }
  int64_t iterations() const { return iterations_; }  // decode iterations run so far
  DraftSource last_source() const { return last_source_; }
  const PhaseTimes& last_times() const { return last_times_; }
  Iteration& iteration() { return iter_; }
  // The proposer of a draft source (null: the engine has none).
  Proposer* proposer(DraftSource s) const { return iter_.proposer(s); }
  // Rows of the last prefill chunk (0 before any), and the pacer that sized it.
  int last_prefill_rows() const { return last_prefill_rows_; }
  const PrefillPacer& pacer() const { return pacer_; }
  // A request's sequence state, while it holds a slot (tests).
  const SeqState* seq_state(uint64_t id) const;
  int slot_of(uint64_t id) const;

 private:
  struct Request;
  struct Choice {
    DraftSource source = DraftSource::kNone;
    int k = 0;
  };
  // A prefill chunk: prompt rows of the prefilling requests, oldest first.
  struct Chunk {
    struct Piece {
      Request* r;
      int first, n;  // prompt rows [first, first + n)
    };
    std::vector<Piece> pieces;
    PromptRows rows;                   // logit_rows [completing]: each completed prompt's last row
    std::vector<Request*> completing;  // the requests whose prompt the chunk completes
  };
  void admit(std::vector<SchedulerEvent>& events);
  // The free slot for a prompt: the one holding the longest prefix of it (at most all but its
  // last token, whose row gives the first token's logits), the least recently used among
  // equals; -1 when none is free. *cached: the prefix's length.
  int pick_slot(const std::vector<int32_t>& prompt, int* cached) const;
  // The live sequence whose prompt shares the longest prefix with this one (*len positions, at
  // most all but its last token); -1 when none shares any. Its cache holds the prefix's first
  // min(*len, prefilled) positions.
  int live_prefix(const std::vector<int32_t>& prompt, int* len) const;
  // The request's draft sources now: those it allows that their proposers let it use
  // (Proposer::active); the sequence's device state follows once it decodes.
  void sync_sources(Request& r);
  Chunk plan_chunk(int budget);
  // After the chunk's target rows ran (from row row0 of the pass): the prompt rows counted, the
  // proposers told.
  void chunk_done(const Chunk& c, int row0, bool others_decoding);
  // The first tokens of the requests the chunk completed, sampled from their logits
  // [completing, vocab] (backend memory); they start decoding.
  void first_tokens(const Chunk& c, const float* logits, std::vector<SchedulerEvent>& events);
  // One prefill chunk as its own forward; returns how many requests it finished (their first
  // tokens are in events).
  int prefill(std::vector<SchedulerEvent>& events, bool others_decoding);
  // The proposers' work before the choice (prompt rows left from the prefill).
  void before_iteration(const std::vector<Request*>& active);
  // lp: the first token's log-probabilities (kLogprobEntries; null when not asked for).
  void start_decoding(Request& r, int32_t first, const TokenLogprob* lp,
                      std::vector<SchedulerEvent>& events);
  // One iteration of the decoding sequences; with carry, it also carries a prefill chunk.
  void decode(std::vector<SchedulerEvent>& events, bool carry);
  // The cost attribution of the iteration decode() just ran (choice c over B sequences, with
  // carried_rows prompt rows in its verify pass; times in last_times_): what the pacer and the
  // draft sources' controllers learn from it. Returns the iteration's own seconds, the carried
  // rows' share left out (what a deferred request weighs against the draft: join_if_pays).
  double attribute_costs(const Choice& c, int B, int carried_rows);
  // The predicted device time of an iteration (source, B, k) (<= 0: not measured yet).
  double predicted_time(DraftSource source, int B, int k, bool prior = true) const;
  // The last chunk's time to the pacer; the proposers read their timers (after a
  // synchronisation).
  void take_prefill_time();
  Choice choose(const std::vector<Request*>& active);
  // How much an offer that did not weigh a plain step itself must beat the plain step's rate by,
  // its own tokens over its own seconds (draft_choice.cpp; the charges of the other proposers,
  // the same per token for both, still count in the plain comparison, without the margin): the
  // offer's tokens and seconds and the plain step's seconds are
  // predictions, each a few percent off (3-4% each at concurrency 4 on the CPU, all toward the
  // proposal: benchmarks/results/HISTORY.md), so a near-tie is a loss as often as a win, and
  // losing it slows the request, where winning it gains little.
  static constexpr double kPlainMargin = 1.1;
  // Appends a final token (and its log-probabilities, kLogprobEntries of them, where the request
  // asks for them); false once the request is finished.
  bool emit(Request& r, int32_t tok, SchedulerEvent& ev, double now, const TokenLogprob* lp);
  // The masks of a constrained sequence's verify rows [1 + tree->n, words] (tree null: a first
  // token's row) from its constraint, none of them empty.
  static void constraint_masks(TokenConstraint& con, const DraftTree* tree, uint32_t* rows,
                               int words);
  // The mask row [words] after a draft chain's tokens (none of it empty).
  static void chain_mask(TokenConstraint& con, const std::vector<int32_t>& chain, uint32_t* row,
                         int words);
  void finish(Request& r, FinishReason why, SchedulerEvent& ev, double now);
  SchedulerEvent& event_for(Request& r, std::vector<SchedulerEvent>& events);

  Runtime& rt_;
  SchedulerOptions opts_;
  RequestLimits limits_;
  Iteration iter_;
  PrefillPacer pacer_;
  std::unique_ptr<Backend::Timer> prefill_timer_;
  int prefill_timed_rows_ = 0;  // rows of the chunk timed and not read yet (0: none)
  int last_prefill_rows_ = 0;
  Proposers proposers_;
  uint64_t next_id_ = 1;
  std::deque<std::unique_ptr<Request>> queue_;
  std::map<uint64_t, std::unique_ptr<Request>> live_;  // requests holding a slot
  std::vector<Request*> slots_;                        // [max_batch]
  // The prompt cache (SchedulerOptions::prompt_cache), per slot: the prompt tokens whose target
  // cache entries (positions [0, size)) the slot's last request left, and when it left them.
  std::vector<std::vector<int32_t>> held_;
  std::vector<uint64_t> released_;
  uint64_t releases_ = 0;
  std::vector<uint64_t> cancels_;
  std::vector<int32_t> iter_slots_;  // the slots the iteration was last set up for
  std::vector<SeqState> seqs_;       // read back after each iteration
  int last_B_ = 0, last_k_ = 0;
  int64_t iterations_ = 0;
  DraftSource last_source_ = DraftSource::kNone;
  PhaseTimes last_times_;
  BackendBuffer tok_, pos_, row_slot_, logit_rows_, logits_, sample_slots_, sampled_;
  BackendBuffer first_rows_, first_lp_;  // the first tokens' log-probabilities: rows, entries
  std::vector<TokenLogprob> lp_;         // the last iteration's (Iteration::read_logprobs)
};

}  // namespace trt_spec
