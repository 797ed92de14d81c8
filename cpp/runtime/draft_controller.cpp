// draft_controller.cpp: the cost model and choice of draft_len="auto" (draft_controller.h).
#include "runtime/draft_controller.h"

#include <algorithm>
#include <cmath>

namespace trt_spec {

void AcceptanceEstimate::observe(int n_accepted, int k) {
  if (k <= 0) return;
  constexpr double kDecay = 0.92;  // about the last dozen iterations count
  accepted = accepted * kDecay + n_accepted;
  rejected = rejected * kDecay + (n_accepted < k ? 1.0 : 0.0);
}

double expected_tokens(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

DraftController::DraftController(int max_batch, int max_k) : max_k_(max_k) {
  costs_.resize(max_batch + 1);
  for (Costs& c : costs_) c.verify.assign(max_k + 2, -1.0);
}

static void ema(double& slot, double x, double w) {
  slot = slot < 0.0 ? x : (1.0 - w) * slot + w * x;
}

void DraftController::observe(int B, int k, double draft_s, double verify_s) {
  if (B <= 0 || B >= static_cast<int>(costs_.size()) || k < 0 || k > max_k_) return;
  Costs& c = costs_[B];
  c.iterations += 1;
  ema(c.verify[k + 1], verify_s, kEma);
  if (k > 0) ema(c.draft_step, draft_s / k, kEma);
}

double DraftController::verify_s(int B, int m) const {
  const std::vector<double>& v = costs_[B].verify;
  if (v[m] >= 0.0) return v[m];
  int lo = -1, hi = -1;  // nearest measured row counts below and above m
  for (int i = m - 1; i >= 1 && lo < 0; --i)
    if (v[i] >= 0.0) lo = i;
  for (int i = m + 1; i < static_cast<int>(v.size()) && hi < 0; ++i)
    if (v[i] >= 0.0) hi = i;
  if (lo > 0 && hi > 0) return v[lo] + (v[hi] - v[lo]) * (m - lo) / (hi - lo);
  const int a = lo > 0 ? lo : hi;
  if (a < 0) return -1.0;
  // One side only: the slope between the two nearest measured points on that side, else a
  // guess of 10% of a step per extra row (verify rows share each weight read).
  int b = -1;
  const int dir = lo > 0 ? -1 : 1;
  for (int i = a + dir; i >= 1 && i < static_cast<int>(v.size()) && b < 0; i += dir)
    if (v[i] >= 0.0) b = i;
  double slope = b > 0 ? (v[a] - v[b]) / (a - b) : 0.1 * v[a];
  return std::max(0.0, v[a] + slope * (m - a));
}

double DraftController::predicted_time(int B, int k) const {
  const double v = verify_s(B, k + 1);
  if (v < 0.0) return -1.0;
  if (k == 0) return v;
  const double d = costs_[B].draft_step;
  return d < 0.0 ? -1.0 : v + k * d;
}

int DraftController::choose(int B, const std::vector<double>& alphas, int k_limit) {
  k_limit = std::min(k_limit, max_k_);
  if (k_limit <= 0) return 0;
  const Costs& c = costs_[B];
  // Measure what the model needs first: a drafting iteration, then a plain target step.
  if (c.draft_step < 0.0) return std::min(k_limit, kFirstK);
  if (c.verify[1] < 0.0) return 0;
  int best = 0;
  double best_rate = -1.0;
  for (int k = 0; k <= k_limit; ++k) {
    const double t = predicted_time(B, k);
    if (t <= 0.0) continue;
    double tokens = 0.0;
    for (double a : alphas) tokens += expected_tokens(a, k);
    if (tokens / t > best_rate) {
      best_rate = tokens / t;
      best = k;
    }
  }
  // Keep the estimates of the neighbours of the best k fresh.
  if (c.iterations % kExplore == kExplore - 1) {
    const int n = (c.iterations / kExplore) % 2 == 0 ? best + 1 : best - 1;
    if (n >= 0 && n <= k_limit) return n;
  }
  return best;
}

}  // namespace trt_spec
