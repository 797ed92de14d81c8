// acceptance.h: the estimates behind the draft-length controllers (draft_controller.h,
// lookup_controller.h): a sequence's running acceptance, the expected tokens of an iteration,
// and the running averages and interpolation of measured costs.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace trt_spec {

// Running per-token acceptance of one sequence for one draft source: decaying counts over a
// prior.
struct AcceptanceEstimate {
  double accepted = 3.0, rejected = 1.0;
  // An iteration that offered a path of depth k and kept n_accepted of it.
  void observe(int n_accepted, int k, double decay = kDecay) {
    if (k <= 0) return;
    accepted = accepted * decay + n_accepted;
    rejected = rejected * decay + (n_accepted < k ? 1.0 : 0.0);
  }
  // One iteration without drafting: a step of kRelax toward the acceptance `mean` (the
  // evidence's weight is kept, its ratio moves).
  void relax(double mean) {
    const double mass = accepted + rejected;
    accepted += kRelax * (mean * mass - accepted);
    rejected = mass - accepted;
  }
  double alpha() const { return accepted / (accepted + rejected); }
  // The same acceptance as evidence of `weight` iterations (a new request's prior from a
  // long-run estimate).
  AcceptanceEstimate with_weight(double weight) const {
    const double a = alpha();
    return AcceptanceEstimate{weight * a, weight * (1.0 - a)};
  }

  static constexpr double kDecay = 0.92;  // about the last dozen iterations count
  static constexpr double kRelax = 0.1;
};

// Mean tokens an iteration offering a path of k draft tokens emits at per-token acceptance
// alpha: 1 + alpha + .. + alpha^k.
inline double expected_tokens(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

// Mean tokens an iteration of k nodes emits over a batch whose sequence b has available[b]
// nodes ready at acceptance alphas[b]: it verifies min(k, available[b]) of them, and a sequence
// with none emits one token.
inline double expected_batch_tokens(const std::vector<double>& alphas,
                                    const std::vector<int>& available, int k) {
  double t = 0.0;
  for (size_t b = 0; b < alphas.size(); ++b)
    t += available[b] > 0 ? expected_tokens(alphas[b], std::min(k, available[b])) : 1.0;
  return t;
}

// Running average of a measured cost; a negative slot is unset. Robust to the stalls of a
// shared machine: a sample counts at most twice the current value (one iteration stalled for
// seconds cannot inflate a cost for good), and a sample below half the current value replaces
// it (the costs seen while stalled are the ones to forget).
inline void ema(double& slot, double x, double w) {
  if (slot < 0.0 || x < 0.5 * slot) {
    slot = x;
    return;
  }
  slot = (1.0 - w) * slot + w * std::min(x, 2.0 * slot);
}

// A cost measured `age` observations ago (of other configurations at the same batch size), faded
// towards what the model's other costs predict for it (`prior`, used where > 0): one stalled
// measurement of a configuration that is then never chosen again does not price it out for
// good, and a configuration whose measurement has aged is re-tried once the prior favours it.
inline double faded(double own, double age, double prior, double keep) {
  const double w = std::pow(keep, age);
  return prior > 0.0 ? w * own + (1.0 - w) * prior : own;
}

// Running means of measured costs, one per configuration (ema; -1: not measured), each stamped
// with the observation count at its last update, so that a mean not refreshed since can be
// faded (faded()) towards a prior as the other configurations are observed.
class AgedCosts {
 public:
  void assign(int n) {
    mean_.assign(n, -1.0);
    at_.assign(n, 0.0);
  }
  // One observation of some configuration (every one ages the means not refreshed by it).
  void tick() { seen_ += 1.0; }
  // Configuration i measured x seconds (after this observation's tick()).
  void observe(int i, double x, double w) {
    ema(mean_[i], x, w);
    at_[i] = seen_;
  }
  double operator[](int i) const { return mean_[i]; }  // the running mean itself
  const std::vector<double>& means() const { return mean_; }
  double age(int i) const { return seen_ - at_[i]; }
  // The mean of measured configuration i, faded towards `prior` (used where > 0) by `keep` per
  // observation since its last.
  double value(int i, double prior, double keep) const {
    return faded(mean_[i], age(i), prior, keep);
  }

 private:
  std::vector<double> mean_, at_;
  double seen_ = 0.0;
};

// What a measured iteration cost with k > 0 draft nodes fades towards: the model's lines for it
// (pass_k, a verify pass of its rows, plus `extra`, its draft steps), but where B's plain step
// t0 is measured at least t0 plus what drafting adds to it (the rows beyond a plain pass, pass_k
// - pass_1, and extra): the lines price passes and draft steps, not an iteration's other work
// (sampling, host work; on a tiny model most of a step). -1 where pass_k is unknown.
inline double iteration_prior(double pass_k, double pass_1, double extra, double t0) {
  if (!(pass_k > 0.0)) return -1.0;
  const double p = pass_k + extra;
  return t0 < 0.0 ? p : std::max(p, t0 + std::max(0.0, pass_k - pass_1) + extra);
}

// v[i] where measured (>= 0), else interpolated between the nearest measured entries, or
// extrapolated from the two nearest on one side (one point only: flat plus `grow` per step).
// Entries below `first` are ignored. -1 when nothing is measured.
inline double interpolate(const std::vector<double>& v, int i, int first, double grow) {
  if (v[i] >= 0.0) return v[i];
  const int n = static_cast<int>(v.size());
  int lo = -1, hi = -1;
  for (int j = i - 1; j >= first && lo < 0; --j)
    if (v[j] >= 0.0) lo = j;
  for (int j = i + 1; j < n && hi < 0; ++j)
    if (v[j] >= 0.0) hi = j;
  if (lo >= 0 && hi >= 0) return v[lo] + (v[hi] - v[lo]) * (i - lo) / (hi - lo);
  const int a = lo >= 0 ? lo : hi;
  if (a < 0) return -1.0;
  const int dir = lo >= 0 ? -1 : 1;
  int b = -1;
  for (int j = a + dir; j >= first && j < n && b < 0; j += dir)
    if (v[j] >= 0.0) b = j;
  const double slope = b >= 0 ? (v[a] - v[b]) / (a - b) : grow * v[a];
  return std::max(0.0, v[a] + slope * (i - a));
}

// interpolate() where the entries say: v[i] measured, or two measured entries (from `first` on)
// to interpolate or extrapolate between; -1 where one measured entry is all there is (one point
// says nothing about the slope: what a row costs differs by 3x between a GPU and a CPU).
inline double interpolate_known(const std::vector<double>& v, int i, int first) {
  int measured = 0;
  for (int j = first; j < static_cast<int>(v.size()); ++j) measured += v[j] >= 0.0 ? 1 : 0;
  return v[i] >= 0.0 || measured >= 2 ? interpolate(v, i, first, 0.0) : -1.0;
}

}  // namespace trt_spec
