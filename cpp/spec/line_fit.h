// line_fit.h: an exponentially weighted least-squares line t = fixed + slope * n, the cost model
// of a forward over n rows (a target pass is about a fixed cost, reading the weights, plus a cost
// per row). Used by the prefill pacer (prompt chunks) and the draft controller (verify passes and
// draft steps of every batch size, the prior of a batch size that has not run yet).
//
// Until two sizes are seen the line cannot be fitted; slope() then returns the time per row
// (fixed cost included), which over-estimates the slope, and at(n) scales the one measured size
// proportionally. at_within() prefers what was measured: a CPU's cost is not a line in the rows
// (its matmul tiles take rows in blocks, so rows past a block cost more than the rows before
// them), and a line fitted mostly to small passes under-prices the larger ones a speculative
// iteration runs. A size's own mean fades towards the line as other sizes are observed and it is
// not (kExactKeep per observation): one stalled pass of a size that is then never chosen again
// does not price it out for good. Deterministic given the observations.
#pragma once

#include <cmath>
#include <vector>

#include "spec/acceptance.h"

namespace trt_spec {

class LineFit {
 public:
  explicit LineFit(double decay) : decay_(decay) { exact_.assign(kExactMax + 1); }

  // One observation: n rows took t seconds (ignored unless n > 0 and t finite, > 0).
  void observe(double n, double t) {
    if (!(n > 0.0) || !(t > 0.0) || !std::isfinite(t)) return;
    const int i = static_cast<int>(n);
    exact_.tick();
    if (i == n && i <= kExactMax) exact_.observe(i, t, kExactEma);
    max_n_ = n > max_n_ ? n : max_n_;
    w_ = decay_ * w_ + 1.0;
    sn_ = decay_ * sn_ + n;
    snn_ = decay_ * snn_ + n * n;
    st_ = decay_ * st_ + t;
    snt_ = decay_ * snt_ + n * t;
  }

  bool empty() const { return w_ <= 0.0; }
  // The (weighted) mean size observed; with one size seen, that size.
  double mean_n() const { return empty() ? 0.0 : sn_ / w_; }
  // Within the sizes seen: a size's own measurements (their running mean, faded towards at(n) by
  // the observations of other sizes since) where it has them, else the straight line between
  // the nearest measured sizes on either side, else at(n);
  // beyond the largest size seen, that size's time scaled proportionally: costs per row that
  // grow with n (tiles, cache) are not under-estimated far from the data.
  double at_within(double n) const {
    if (n > max_n_ && !empty()) return at_within(max_n_) * n / max_n_;
    const int i = static_cast<int>(n);
    if (i == n && i <= kExactMax) {
      if (exact_[i] > 0.0) return own(i);
      int lo = i - 1, hi = i + 1;
      while (lo > 0 && !(exact_[lo] > 0.0)) --lo;
      while (hi <= kExactMax && !(exact_[hi] > 0.0)) ++hi;
      if (lo > 0 && hi <= kExactMax) return own(lo) + (own(hi) - own(lo)) * (n - lo) / (hi - lo);
    }
    return at(n);
  }
  // Whether two sizes have been seen, with a positive slope: a line, not a proportion.
  bool fitted() const { return fit_slope() > 0.0; }

  // Seconds per row: the fitted slope, else time per row (0 when empty).
  double slope() const {
    if (empty()) return 0.0;
    const double s = fit_slope();
    return s > 0.0 ? s : st_ / sn_;
  }

  // Predicted seconds for n rows (-1 when empty): the line where fitted (never below a tenth of
  // the proportional estimate), else proportional to the sizes seen.
  double at(double n) const {
    if (empty()) return -1.0;
    const double s = fit_slope();
    const double prop = st_ / sn_ * n;
    if (!(s > 0.0)) return prop;
    const double fixed = (st_ - s * sn_) / w_;
    const double t = fixed + s * n;
    return t > 0.1 * prop ? t : 0.1 * prop;
  }

 private:
  // Measured size i's running mean, faded towards the line by the observations since its last.
  double own(int i) const {
    return exact_.value(i, exact_.age(i) > 0.0 ? at(i) : -1.0, kExactKeep);
  }

  // The weighted least-squares slope; 0 with one size (or a fit that makes no sense).
  double fit_slope() const {
    if (empty()) return 0.0;
    const double var = snn_ * w_ - sn_ * sn_;  // (weighted) spread of the sizes
    if (!(var > 1e-9 * snn_ * w_)) return 0.0;
    const double s = (snt_ * w_ - sn_ * st_) / var;
    return s > 0.0 ? s : 0.0;
  }

  static constexpr int kExactMax = 128;       // sizes measured one by one: [1, kExactMax]
  static constexpr double kExactEma = 0.25;   // their running means: about the last 4
  static constexpr double kExactKeep = 0.97;  // per observation of another size: half in ~23
  double decay_;
  AgedCosts exact_;  // [kExactMax + 1] seconds of each size (-1: none), aged per observation
  double w_ = 0.0, sn_ = 0.0, snn_ = 0.0, st_ = 0.0, snt_ = 0.0;
  double max_n_ = 0.0;
};

}  // namespace trt_spec
