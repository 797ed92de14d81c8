// draft_controller.h: the draft model's draft-length controller (draft_len="auto"): picks the
// draft length k of each iteration from the measured costs and the running acceptance. (Prompt
// lookup has its own, lookup_controller.h; the scheduler compares their offers.)
//
// Model: with per-token acceptance a, an iteration drafting k tokens emits on average
//   E(a, k) = 1 + a + .. + a^k = (1 - a^(k+1)) / (1 - a)
// tokens per sequence and takes T(B, k) seconds for B sequences. The controller picks the k in
// [0, k_limit] that maximises sum_b E(a_b, k) / T(B, k); k = 0 is a plain target step.
// T(B, k) is the running average of measured iterations where k has run; otherwise
// k * draft_step(B) + verify(B, k + 1 rows) from measured phases, verify times of unmeasured row
// counts interpolated between two that B measured, or else read off the cross-B line below;
// otherwise interpolated between measured k. The first iterations measure what the model needs
// (kFirstK, then k = 0).
//
// Every cost is device time, measured by the scheduler with backend timers (Backend::Timer:
// the host clock on the CPU, events on a GPU's stream, read after the iteration's read-back):
// an iteration's two phases and the draft's catch-up alike, never a capture (graphs are
// captured before the timed iteration, and a graph's first launch is a warm-up that is not
// observed; iteration.h).
//
// k = 0 leaves each sequence one token the draft has not read; the next drafting iteration
// first runs those through the draft (the catch-up: one draft forward over the tokens every
// sequence lags, a fixed part plus a part per row, so n rows cost far less than n one-row
// catch-ups; catch_up_time). Whether that cost counts depends on the regime, judged from the
// long-run acceptance a_L:
//   - drafting pays at a_L (max_k B E(a_L, k) / T(B, k) > B / T(B, 0)): a k = 0 stretch is a
//     dip that will end, so k = 0 is charged T(B, 0) + the catch-up of B rows (one each);
//   - it does not: k = 0 may last for good and costs T(B, 0). Drafting is then probed only
//     when the lag to catch up is short (after a prefill, which feeds the draft), with
//     backoff, since a probe after a long stretch would pay the whole catch-up.
// The regime switches with a 3% margin. While k = 0 nothing is observed, so a sequence's
// estimate relaxes toward a_L (AcceptanceEstimate::relax): a short bad stretch does not stop
// it from drafting for the rest of its request. Drafting iterations probe a neighbour of the
// best k every kExplore iterations to keep its measured cost current, and, every kZeroEvery
// drafting iterations, k = 0 itself (while the lag is short), so that one noisy measurement
// of the plain step cannot keep it drafting for good.
//
// A batch size that has not drafted yet starts from a prior rather than a forced measurement:
// every verify pass and plain step, at any B, feeds one line of the target pass's cost against
// its rows in all (B * rows per sequence), and every drafting iteration one line of a draft
// step's cost against B (spec/line_fit.h; with one B seen, that B's step scaled as the target's
// pass scales). T(B, k) = k * step(B) + pass(B * (k + 1)) until B's own iterations are measured,
// so a batch that grows from 1 to 4 does not pay a kFirstK iteration of 4 * 5 rows at each size
// to learn what the line already says (on a CPU, where rows cost compute, that it does not pay).
//
// Reading a prompt costs the draft about half of the target's prefill, paid before it can draft
// at all, so a fully automatic request (draft="auto", draft_len="auto") lets the draft read its
// prompt only when drafting is expected to save more than that over the request: reads_prompt()
// compares new_tokens * (T(B, 0) - T(B, k*) / E(a_L, k*)), the long-run saving of the best k,
// with prompt_rows * the measured seconds per prompt row (observe_read). Until both are measured
// (or B's cross-B prior is known), the first request reads, so that they get measured, and the
// others do not (requests arriving together would all pay the read before anything says it
// pays); of the requests that would not read, one in kReadEvery reads anyway, so that the
// acceptance and costs stay current when the traffic changes, and while those reads keep
// finding that it does not pay, one in twice as many, up to kMaxReadEvery (a read that pays
// sets it back). A request that may also use prompt lookup and whose read pays (kPays) may wait
// instead, where that is expected to pay (defers(): lookup may beat the draft on it, as on an
// edit that copies its input, but a request that joins anyway loses its first tokens' saving):
// the scheduler then decides after its first tokens, from what they cost it (join_saving(),
// catch_up_pays(); engine/draft_choice.cpp).
#pragma once

#include <utility>
#include <vector>

#include "spec/acceptance.h"
#include "spec/line_fit.h"

namespace trt_spec {

class DraftController {
 public:
  DraftController(int max_batch, int max_k);

  // k for the next iteration of B sequences with acceptances alphas[b], at most k_limit;
  // lag: tokens the draft has still to catch up, summed over the B sequences.
  int choose(int B, const std::vector<double>& alphas, int k_limit, int lag = 0);
  // Records an iteration: its total time, and its phases when measured (draft_s < 0: not).
  // rows: the verify rows its target pass computed (< 0: B * (k + 1)); a pass that skipped
  // padding rows (Iteration::compact_rows) feeds the cross-B line at its rows, not B's tables.
  void observe(int B, int k, double total_s, double draft_s, double verify_s, int rows = -1);
  // Records the accepted length of one sequence (for the prior of later requests).
  void observe_acceptance(int n_accepted, int k);
  // Records a draft catch-up: one forward over `tokens` rows (of one sequence or several).
  void observe_catch_up(int tokens, double seconds);
  // Records the draft's reading of `rows` prompt rows (prefill chunks).
  void observe_read(int rows, double seconds);
  // Seconds per prompt row the draft reads (-1 before any read is measured).
  double read_per_row() const { return read_row_; }
  // Whether the draft model should read the prompt of a request with `prompt_rows` rows and up to
  // `new_tokens` new tokens that will decode among B sequences (see above); counts the skips.
  // kPays: the expected saving over plain steps beats the read; kMeasure: read to measure the
  // costs (the first request) or to explore.
  enum class PromptRead { kSkip, kPays, kMeasure };
  PromptRead reads_prompt(int B, int prompt_rows, int new_tokens);
  // The test reads_prompt() applies once the costs are known, without its counters: the saving
  // over plain steps beats the read. (False while the costs are unknown.)
  bool read_pays(int B, int prompt_rows, int new_tokens) const;
  // Whether a request that has decoded without the draft model should have it read the `rows`
  // rows so far now: `saving` (the seconds drafting is expected to save over the rest of that
  // request) beats kJoinMargin times the read, which the B decoding sequences all wait for.
  // (False while the read's cost is unknown.) The margin: a join cannot be undone, and its
  // saving is over-estimated where it matters. It prices drafting at the long-run acceptance,
  // but text that lookup predicts badly is mostly text the draft model predicts worse than
  // usual too (on the 20 edits, the per-prompt speed-ups of lookup and of the draft model
  // correlate at 0.7-0.8); and lookup's first tokens of an answer, before its n-grams take
  // hold, cost more than its later ones. Joins that barely paid on paper lost in practice
  // (two of 20 edits, s17); a request whose lookup is poor over a long answer still joins.
  bool catch_up_pays(int B, int rows, double saving) const;
  // Whether a request whose read pays (kPays) and that may use prompt lookup waits (see above):
  // waiting costs a request that joins anyway its first defer_tokens tokens without the draft
  // (defer_tokens * saving_per_token(B) at most), and saves one that never joins the read of its
  // prompt_rows rows; weighed at the measured share of waiting requests that joined
  // (observe_deferral; 0.5 before any), one in kReadEvery of the others waiting anyway to keep
  // that share current.
  bool defers(int B, int prompt_rows, int defer_tokens);
  // A waiting request joined (true), or ended without joining after its first tokens (false).
  void observe_deferral(bool joined);
  double join_rate() const { return join_rate_; }
  // Seconds per token the draft model would save by joining a request of B sequences that has
  // decoded without it, from that request's iterations so far: plain steps (seconds, tokens) and
  // lookup's. Once it joins, each iteration takes the better of drafting and what ran, but a
  // token it does not draft costs it a catch-up later; so a token of a kind that took t seconds
  // saves t - drafting where drafting is cheaper and costs min(catch-up, drafting - t) where
  // not. 0 while drafting's cost is unknown or no token is given.
  double join_saving(int B, double plain_s, int plain_tokens, double lookup_s,
                     int lookup_tokens) const;
  // Seconds per token of one of B sequences drafting at the best k and the long-run acceptance
  // (first), and with plain steps (second), from B's costs or its cross-B prior, else B = 1's;
  // {-1, -1} when none of those is known yet.
  std::pair<double, double> per_token(int B) const;
  // Seconds the draft model is expected to save per token of one of B sequences (negative:
  // drafting costs more than it gives): per_token()'s plain minus drafting; 0 when unknown.
  double saving_per_token(int B) const;
  // The estimate a new request starts from: the long-run acceptance, weight 4.
  AcceptanceEstimate prior() const;
  double long_run_alpha() const { return long_run_.alpha(); }
  // Seconds of a catch-up of `tokens` rows (one draft forward over them, of one sequence or
  // several): the line fitted to the measured catch-ups once two sizes are seen; one size scaled
  // as a draft step scales with its rows; before any, step_prior(tokens), else a draft step per
  // token; 0 if nothing is known. catch_up_per_token(): that of one token (what a plain step
  // leaves one sequence).
  double catch_up_time(int tokens) const;
  double catch_up_per_token() const;

  // The model's iteration time; negative when not enough is measured for B yet. prior: whether
  // a B that has not drafted may be priced by the cross-B lines (false: B's own costs only).
  double predicted_time(int B, int k, bool prior = true) const;
  // Predicted tokens per second of drafting k for B sequences whose expected tokens sum to
  // `tokens` (-1 when unknown).
  double rate(int B, int k, double tokens) const;
  // Seconds of a verify pass of `rows` rows per sequence for B sequences: measured, or
  // interpolated / extrapolated between two row counts B has measured; else, with
  // `prior`, the cross-B line (a single measured row count of B says nothing about the cost
  // of a row, which is ~0.1 of a step on a GPU and ~0.3 on a CPU), and before that line exists
  // B's one measured pass plus 0.1 of it per row; -1 when nothing says. Other proposers'
  // iterations are verify passes.
  double verify_time(int B, int rows, bool prior = true) const;
  // Records a verify pass of `rows` rows per sequence timed by another proposer's iteration;
  // computed: the rows the pass computed (< 0: B * rows), as in observe().
  void observe_verify(int B, int rows, double seconds, int computed = -1);
  // Whether drafting pays at the long-run acceptance for B sequences (the regime): then every
  // token emitted without the draft model costs it a catch-up row later.
  bool drafting_pays(int B) const { return costs_[B].drafting_pays; }

  static constexpr int kFirstK = 4;
  static constexpr int kExplore = 16;
  static constexpr int kZeroEvery = 32;
  static constexpr int kMaxExplore = 256;
  static constexpr double kEma = 0.25;
  static constexpr double kKeep =
      0.95;  // a T(B, k) not re-measured fades to the prior: ~14 to half
  static constexpr double kLongDecay = 0.99;  // the long-run acceptance: about 100 iterations
  static constexpr double kRegimeMargin = 0.03;
  static constexpr double kCheapLag = 0.25;   // probe from k = 0 while catch-up < this * T(B, 0)
  static constexpr int kReadEvery = 8;        // of the requests not worth a read, one reads,
  static constexpr int kMaxReadEvery = 64;    // then one in 16, 32, .. while reads do not pay
  static constexpr double kFitDecay = 0.9;    // the cross-B lines: about the last 10 passes
  static constexpr double kJoinEma = 0.125;   // join_rate(): about the last 8 waiting requests
  static constexpr double kJoinMargin = 2.0;  // catch_up_pays(): saving / read at least

  // The cross-B prior (see above): seconds of a target pass of `rows` rows in all, and of a
  // draft step of B sequences; -1 until the lines can say (two pass sizes, one step).
  double pass_prior(int rows) const;
  double step_prior(int B) const;

 private:
  bool measured(int B) const;             // T(B, 0) and some drafting T(B, k) measured
  double prior_time(int B, int k) const;  // k * step_prior(B) + pass_prior(B * (k + 1))
  // What a measured T(B, k) fades towards while it is not re-measured: prior_time(B, 0) for
  // k = 0, else iteration_prior() of the cross-B lines and B's measured plain step.
  double fade_target(int B, int k) const;
  bool priced(int B) const;      // measured(B), or B's drafting has a cross-B prior
  bool read_known(int B) const;  // a read's cost and B's saving (or B = 1's) are known
  // B's verify time from its own table (see verify_time); one_point: also from a single
  // measured row count, flat plus 0.1 of it per row. -1 where the table does not say. B and
  // rows checked by the caller.
  double table_verify(int B, int rows, bool one_point) const;
  struct Costs {
    double draft_step = -1.0;    // seconds per draft step
    std::vector<double> verify;  // [max_k + 2]: seconds per verify pass of m rows; -1 unknown
    AgedCosts total;             // [max_k + 1]: seconds per iteration with k drafts (aged by
                                 // every iteration and pass observed at this B)
    int since_probe = 0, probe_every = kExplore, probes = 0;
    int since_zero = 0;         // drafting iterations since the last k = 0
    bool drafting_pays = true;  // the regime (see above)
  };
  int max_k_;
  std::vector<Costs> costs_;      // [max_batch + 1]
  LineFit catch_ups_{kFitDecay};  // seconds of a catch-up against its rows
  double read_row_ = -1.0;        // seconds per prompt row the draft reads
  int skipped_reads_ = 0;         // requests not read since the last exploring read
  int read_every_ = kReadEvery;
  double join_rate_ = 0.5;  // of the waiting requests, the share that joined (running mean)
  int skipped_defers_ = 0;  // requests that read at once since the last one that waited
  int unknown_reads_ = 0;   // requests asked about before the costs were known
  AcceptanceEstimate long_run_;
  LineFit passes_{kFitDecay};  // a target pass's seconds against its rows, any B
  LineFit steps_{kFitDecay};   // a draft step's seconds against B
};

}  // namespace trt_spec
