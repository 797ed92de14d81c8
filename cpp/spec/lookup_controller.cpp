// lookup_controller.cpp: prompt lookup's cost model and offer (lookup_controller.h).
#include "spec/lookup_controller.h"

#include <algorithm>

namespace trt_spec {

LookupController::LookupController(int max_batch, int max_k, const DraftController* model)
    : max_k_(max_k), model_(model) {
  costs_.resize(max_batch + 1);
  for (Costs& c : costs_) c.total.assign(max_k + 1);
  // A start: proposals found by matching 2 or more tokens are often right, a 1-gram's less often
  // (the running estimates move away from these within a few dozen iterations).
  for (int c = 0; c < kNgramClasses; ++c) {
    long_run_[c].accepted = c == 0 ? 1.0 : 3.0;
    long_run_[c].rejected = c == 0 ? 2.0 : 1.0;
  }
}

AcceptanceEstimate LookupController::prior(int ngram) const {
  return long_run_[ngram_class(ngram)].with_weight(4.0);
}

double LookupController::predicted_time(int B, int k, bool prior) const {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || k < 0 || k > max_k_) return -1.0;
  const Costs& c = costs_[B];
  if (c.total[k] >= 0.0) {  // faded towards the pass line (iteration_prior, for k > 0)
    double p = -1.0;
    if (prior && c.total.age(k) > 0.0)
      p = k == 0 ? pass_time(B)
                 : iteration_prior(pass_time(B * (k + 1)), pass_time(B), 0.0, c.total[0]);
    return c.total.value(k, p, DraftController::kKeep);
  }
  if (model_) {
    const double v = model_->verify_time(B, k + 1, prior);
    if (v >= 0.0) return v;
  }
  const double own = interpolate_known(c.total.means(), k, 0);  // (one measured k does not say)
  if (own >= 0.0 || !prior) return own;
  if (passes_.fitted()) return passes_.at_within(B * (k + 1));
  return interpolate(c.total.means(), k, 0, 0.35);  // one measured k: flat plus 0.35 of it per node
}

void LookupController::observe(int B, int k, double total_s, int rows) {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || k < 0 || k > max_k_ || total_s < 0.0)
    return;
  const bool full = rows < 0 || rows == B * (k + 1);
  Costs& c = costs_[B];
  c.total.tick();
  if (full) c.total.observe(k, total_s, kEma);
  passes_.observe(full ? B * (k + 1) : rows, total_s);
}

double LookupController::pass_time(int rows) const {
  const double line = model_ ? model_->pass_prior(rows) : -1.0;
  if (line > 0.0) return line;
  return passes_.fitted() ? passes_.at_within(rows) : -1.0;
}

LookupController::Offer LookupController::offer(int B, const std::vector<double>& alphas,
                                                const std::vector<int>& available, int k_limit,
                                                bool compact) {
  Offer best;
  if (B <= 0 || B >= static_cast<int>(costs_.size())) return best;
  int most = 0;
  for (int m : available) most = std::max(most, m);
  k_limit = std::min({k_limit, max_k_, most});
  if (k_limit <= 0) return best;
  auto tokens = [&](int k) { return expected_batch_tokens(alphas, available, k); };
  // The iteration's time with k nodes; where the pass skips padding rows and k pads some
  // sequence, that of the rows it computes.
  auto time = [&](int k) {
    int rows = 0;
    for (int m : available) rows += 1 + std::min(k, std::max(m, 0));
    const double t = compact && rows < B * (k + 1) ? pass_time(rows) : -1.0;
    return t > 0.0 ? t : predicted_time(B, k);
  };
  Costs& c = costs_[B];
  double best_rate = -1.0;
  for (int k = 1; k <= k_limit; ++k) {
    const double t = time(k);
    if (t <= 0.0) continue;
    const double r = tokens(k) / t;
    if (r > best_rate) {
      best_rate = r;
      best = Offer{k, tokens(k), t};
    }
  }
  if (best.k == 0) {  // nothing measured yet: measure kFirstK (or what there is)
    const int k = std::min(kFirstK, k_limit);
    return Offer{k, tokens(k), -1.0};
  }
  if (++c.since_probe >= kExplore) {  // keep a neighbour's cost current
    c.since_probe = 0;
    c.probes += 1;
    const int n = c.probes % 2 == 0 ? best.k + 1 : best.k - 1;
    if (n >= 1 && n <= k_limit) return Offer{n, tokens(n), time(n)};
  }
  return best;
}

}  // namespace trt_spec
