// draft_controller.cpp: the cost model and choice of draft_len="auto" (draft_controller.h).
#include "spec/draft_controller.h"

#include <algorithm>
#include <cmath>

namespace trt_spec {

DraftController::DraftController(int max_batch, int max_k) : max_k_(max_k) {
  costs_.resize(max_batch + 1);
  for (Costs& c : costs_) {
    c.verify.assign(max_k + 2, -1.0);
    c.total.assign(max_k + 1);
  }
}

void DraftController::observe(int B, int k, double total_s, double draft_s, double verify_s,
                              int rows) {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || k < 0 || k > max_k_) return;
  Costs& c = costs_[B];
  const bool full = rows < 0 || rows == B * (k + 1);  // (else B's tables would mix row counts)
  c.total.tick();
  if (full) c.total.observe(k, total_s, kEma);
  if (draft_s < 0.0) {
    if (k == 0) passes_.observe(B, total_s);  // a plain step is a pass of B rows
    return;
  }
  if (full) ema(c.verify[k + 1], verify_s, kEma);
  passes_.observe(full ? B * (k + 1) : rows, verify_s);
  if (k > 0) {
    ema(c.draft_step, draft_s / k, kEma);
    steps_.observe(B, draft_s / k);
  }
}

double DraftController::pass_prior(int rows) const {
  return passes_.fitted() ? passes_.at_within(rows) : -1.0;
}

double DraftController::step_prior(int B) const {
  if (steps_.empty() || !passes_.fitted()) return -1.0;
  if (steps_.fitted()) return steps_.at_within(B);
  const double b0 = steps_.mean_n();  // one B seen: scale its step as the target's pass scales
  return steps_.at(b0) * pass_prior(B) / pass_prior(static_cast<int>(std::lround(b0)));
}

double DraftController::prior_time(int B, int k) const {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || k < 0 || k > max_k_) return -1.0;
  const double pass = pass_prior(B * (k + 1));
  if (pass < 0.0 || k == 0) return pass;
  const double step = step_prior(B);
  return step < 0.0 ? -1.0 : pass + k * step;
}

double DraftController::fade_target(int B, int k) const {
  if (k == 0) return prior_time(B, 0);
  const double step = step_prior(B);
  if (step < 0.0) return -1.0;
  return iteration_prior(pass_prior(B * (k + 1)), pass_prior(B), k * step, costs_[B].total[0]);
}

void DraftController::observe_acceptance(int n_accepted, int k) {
  long_run_.observe(n_accepted, k, kLongDecay);
}

void DraftController::observe_catch_up(int tokens, double seconds) {
  catch_ups_.observe(tokens, seconds);
}

void DraftController::observe_read(int rows, double seconds) {
  if (rows > 0 && seconds >= 0.0) ema(read_row_, seconds / rows, kEma);
}

bool DraftController::measured(int B) const {
  if (B <= 0 || B >= static_cast<int>(costs_.size())) return false;
  const Costs& c = costs_[B];
  if (c.total[0] < 0.0) return false;
  for (int k = 1; k <= max_k_; ++k)
    if (c.total[k] >= 0.0) return true;
  return false;
}

bool DraftController::priced(int B) const {
  return measured(B) || prior_time(B, 1) > 0.0;
}

std::pair<double, double> DraftController::per_token(int B) const {
  if (!priced(B)) B = 1;  // B not measured and no cross-B prior: B = 1's
  if (!priced(B)) return {-1.0, -1.0};
  // Per token of one sequence: an iteration's time over the tokens it gives each sequence.
  const double t0 = predicted_time(B, 0), a = long_run_.alpha();
  double best = -1.0;
  for (int k = 1; k <= max_k_; ++k) {
    const double t = predicted_time(B, k);
    if (t <= 0.0) continue;
    const double per_token = t / expected_tokens(a, k);
    if (best < 0.0 || per_token < best) best = per_token;
  }
  return {best, t0};
}

double DraftController::saving_per_token(int B) const {
  const auto [drafting, plain] = per_token(B);
  return drafting < 0.0 ? 0.0 : plain - drafting;
}

bool DraftController::read_known(int B) const {
  return read_row_ >= 0.0 && (priced(B) || measured(1));
}

bool DraftController::read_pays(int B, int prompt_rows, int new_tokens) const {
  return read_known(B) && new_tokens * saving_per_token(B) > prompt_rows * read_row_;
}

double DraftController::join_saving(int B, double plain_s, int plain_tokens, double lookup_s,
                                    int lookup_tokens) const {
  const double drafting = per_token(B).first, cu = catch_up_per_token();
  const int n = plain_tokens + lookup_tokens;
  if (drafting <= 0.0 || n <= 0) return 0.0;
  auto change = [&](double seconds, int tokens) {
    if (tokens <= 0) return 0.0;
    const double t = seconds / tokens;
    return tokens * (t > drafting ? t - drafting : -std::min(cu, drafting - t));
  };
  return (change(plain_s, plain_tokens) + change(lookup_s, lookup_tokens)) / n;
}

bool DraftController::defers(int B, int prompt_rows, int defer_tokens) {
  if (read_row_ < 0.0) return false;
  const double p = join_rate_;
  if ((1.0 - p) * prompt_rows * read_row_ > p * defer_tokens * saving_per_token(B)) return true;
  if (++skipped_defers_ >= kReadEvery) {  // keep the share current
    skipped_defers_ = 0;
    return true;
  }
  return false;
}

void DraftController::observe_deferral(bool joined) {
  join_rate_ += kJoinEma * ((joined ? 1.0 : 0.0) - join_rate_);
}

bool DraftController::catch_up_pays(int B, int rows, double saving) const {
  return read_row_ >= 0.0 && saving > kJoinMargin * B * rows * read_row_;
}

DraftController::PromptRead DraftController::reads_prompt(int B, int prompt_rows, int new_tokens) {
  const bool known = read_known(B);
  if (!known) {  // the costs are learnt from the first request; the others do not wait on it
    if (unknown_reads_++ == 0) return PromptRead::kMeasure;
  } else if (read_pays(B, prompt_rows, new_tokens)) {
    read_every_ = kReadEvery;
    return PromptRead::kPays;
  }
  if (++skipped_reads_ >= read_every_) {  // explore: the traffic may have changed
    skipped_reads_ = 0;
    if (known) read_every_ = std::min(2 * read_every_, kMaxReadEvery);
    return PromptRead::kMeasure;
  }
  return PromptRead::kSkip;
}

double DraftController::catch_up_time(int tokens) const {
  if (tokens <= 0) return 0.0;
  if (catch_ups_.fitted()) return catch_ups_.at_within(tokens);
  // One size measured (or none): scaled as a draft forward's cost scales with its rows (the
  // draft step's cross-B line: a step of B sequences is a forward of B rows), not in proportion:
  // a one-token catch-up reads all the draft's weights for one row.
  const double step = step_prior(tokens);
  if (!catch_ups_.empty()) {
    const double n0 = catch_ups_.mean_n();
    const double s0 = step_prior(std::max(1, static_cast<int>(std::lround(n0))));
    return step > 0.0 && s0 > 0.0 ? catch_ups_.at(n0) * step / s0 : catch_ups_.at(tokens);
  }
  if (step > 0.0) return step;
  double s = 0.0;
  for (const Costs& c : costs_) s = std::max(s, c.draft_step);
  return s * tokens;
}

double DraftController::catch_up_per_token() const {
  return catch_up_time(1);
}

AcceptanceEstimate DraftController::prior() const {
  return long_run_.with_weight(4.0);
}

double DraftController::predicted_time(int B, int k, bool prior) const {
  const Costs& c = costs_[B];
  if (c.total[k] >= 0.0)
    return c.total.value(k, prior && c.total.age(k) > 0.0 ? fade_target(B, k) : -1.0, kKeep);
  if (c.draft_step >= 0.0) {  // phases measured: k draft steps + a verify pass of k + 1 rows
    const double v = verify_time(B, k + 1, prior);
    if (v >= 0.0) return v + k * c.draft_step;
  }
  const double p = prior ? prior_time(B, k) : -1.0;  // B has not drafted: the cross-B lines
  return p > 0.0 ? p : interpolate(c.total.means(), k, 0, 0.5);
}

double DraftController::rate(int B, int k, double tokens) const {
  const double t = predicted_time(B, k);
  return t > 0.0 ? tokens / t : -1.0;
}

double DraftController::table_verify(int B, int rows, bool one_point) const {
  const Costs& c = costs_[B];
  const int last = static_cast<int>(c.verify.size()) - 1, r = std::min(rows, last);
  const double v = one_point ? interpolate(c.verify, r, 1, 0.1) : interpolate_known(c.verify, r, 1);
  return v < 0.0 || rows <= last ? v : v * (1.0 + 0.1 * (rows - last));
}

double DraftController::verify_time(int B, int rows, bool prior) const {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || rows < 1) return -1.0;
  const double own = table_verify(B, rows, false);
  if (own >= 0.0 || !prior) return own;
  const double line = pass_prior(B * rows);  // B's own rows do not say: the cross-B line
  // No line yet (one pass size seen in all): B's one measured pass, flat plus 0.1 per row.
  return line > 0.0 ? line : table_verify(B, rows, true);
}

void DraftController::observe_verify(int B, int rows, double seconds, int computed) {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || rows < 1 || seconds < 0.0) return;
  Costs& c = costs_[B];
  const bool full = computed < 0 || computed == B * rows;
  c.total.tick();
  if (full && rows < static_cast<int>(c.verify.size())) ema(c.verify[rows], seconds, kEma);
  passes_.observe(full ? B * rows : computed, seconds);
}

int DraftController::choose(int B, const std::vector<double>& alphas, int k_limit, int lag) {
  k_limit = std::min(k_limit, max_k_);
  if (k_limit <= 0) return 0;
  Costs& c = costs_[B];
  // Measure what the model needs first, a drafting iteration, then a plain target step, unless
  // the cross-B lines predict both.
  bool drafted = false;
  for (int k = 1; k <= max_k_; ++k) drafted = drafted || c.total[k] >= 0.0;
  const bool prior = prior_time(B, 1) > 0.0;
  if (!drafted && !prior) return std::min(k_limit, kFirstK);
  if (c.total[0] < 0.0 && !prior) return 0;
  // A plain step leaves each sequence a token to catch up (one draft forward of B rows, in a
  // one-step dip); the lag so far is one forward over its rows.
  const double t0 = predicted_time(B, 0), cu = catch_up_time(B), lag_s = catch_up_time(lag);
  // The regime: does drafting pay at the long-run acceptance?
  double long_best = 0.0;
  for (int k = 1; k <= max_k_; ++k)
    long_best = std::max(long_best, rate(B, k, B * expected_tokens(long_run_.alpha(), k)));
  const double ratio = long_best * t0 / B;  // against target-only
  if (c.drafting_pays && ratio < 1.0 - kRegimeMargin) c.drafting_pays = false;
  if (!c.drafting_pays && ratio > 1.0 + kRegimeMargin) c.drafting_pays = true;

  int best = 0;
  double best_rate = B / (t0 + (c.drafting_pays ? cu : 0.0));
  for (int k = 1; k <= k_limit; ++k) {
    double tokens = 0.0;
    for (double a : alphas) tokens += expected_tokens(a, k);
    const double r = rate(B, k, tokens);
    if (r > best_rate) {
      best_rate = r;
      best = k;
    }
  }
  if (best == 0) {
    c.since_zero = 0;
  } else if (++c.since_zero >= kZeroEvery && lag_s <= kCheapLag * t0) {
    c.since_zero = 0;  // re-measure the plain step now and then
    return 0;
  }
  // Probe a neighbour of the best k now and then: its cost may have been mis-estimated, and
  // at k = 0 the acceptance is not observed at all. Probes from k = 0 back off and wait for
  // a short lag.
  if (++c.since_probe >= c.probe_every) {
    if (best == 0) {
      if (lag_s > kCheapLag * t0) return 0;  // due: at the next cheap moment
      c.since_probe = 0;
      c.probe_every = std::min(2 * c.probe_every, kMaxExplore);
      return 1;
    }
    c.since_probe = 0;
    c.probes += 1;
    c.probe_every = kExplore;
    const int n = c.probes % 2 == 0 ? best + 1 : best - 1;
    if (n >= 1 && n <= k_limit) return n;
  }
  return best;
}

}  // namespace trt_spec
