// prefill_pacer.h: how many prompt rows a prefill chunk may take while other sequences decode,
// so that a long prompt does not stall them, on any device.
//
// A fixed row count cannot do it: 64 rows of a 1.5B model cost about one decode iteration on a
// GPU but several on a 2-core CPU, where every decoding stream would wait that long for its next
// token. The pacer learns, from device time (backend timers, never a capture):
//   * a prefill chunk's cost as fixed + per_row * rows: an exponentially weighted least-squares
//     fit over recent chunks (spec/line_fit.h; with one chunk size seen so far, per_row = time /
//     rows, which over-estimates per_row and so errs on the small side);
//   * a decode iteration's cost D (an exponentially weighted mean).
// While others decode, a chunk takes rows = D / per_row (its rows cost about one iteration, so a
// long prompt about doubles the others' inter-token latency, plus the chunk's fixed cost),
// clamped to [min_rows, max_rows]; max_rows (the scheduler's interleave_chunk) until both are
// measured.
//
// A chunk carried by a decode iteration's verify pass (Iteration::carry, host backends) has no
// fixed cost of its own: the scheduler observes its rows' share, the iteration's time less the
// decode's predicted cost (observe_carried: an exponentially weighted mean per row), and sizes
// carried chunks by it (carried_rows). Deterministic given the observations (tests drive it with
// a scripted clock).
#pragma once

#include <algorithm>
#include <cmath>

#include "spec/line_fit.h"

namespace trt_spec {

class PrefillPacer {
 public:
  static constexpr double kDecay = 0.8;  // weight of the past per observation
  static constexpr int kMinRows = 8;

  explicit PrefillPacer(int max_rows) : max_rows_(std::max(1, max_rows)) {}

  // A prefill chunk of `rows` rows (both models) took `seconds` of device time.
  void observe_prefill(int rows, double seconds) { chunks_.observe(rows, seconds); }
  // A decode iteration took `seconds` of device time.
  void observe_decode(double seconds) {
    if (!(seconds > 0.0) || !std::isfinite(seconds)) return;
    decode_s_ = decode_s_ > 0.0 ? kDecay * decode_s_ + (1.0 - kDecay) * seconds : seconds;
  }

  // A chunk of `rows` rows carried by a decode iteration added `seconds` to it.
  void observe_carried(int rows, double seconds) {
    if (rows < 1 || !(seconds > 0.0) || !std::isfinite(seconds)) return;
    const double r = seconds / rows;
    carried_row_ = carried_row_ > 0.0 ? kDecay * carried_row_ + (1.0 - kDecay) * r : r;
  }

  // Seconds per prompt row (0: not measured yet).
  double per_row() const { return chunks_.slope(); }
  double decode_seconds() const { return decode_s_; }

  // Seconds per carried prompt row (0: not measured yet).
  double carried_row() const { return carried_row_; }

  // Rows for the next chunk while other sequences decode: a separate forward, or carried by
  // their iteration (priced by carried rows once measured, else as a separate chunk's rows).
  int interleave_rows(bool carried = false) const {
    const double r = carried && carried_row_ > 0.0 ? carried_row_ : per_row();
    if (r <= 0.0 || decode_s_ <= 0.0) return max_rows_;
    const double rows = std::floor(decode_s_ / r + 1e-6);  // (an exact quotient stays whole)
    return static_cast<int>(std::clamp(rows, static_cast<double>(std::min(kMinRows, max_rows_)),
                                       static_cast<double>(max_rows_)));
  }

 private:
  int max_rows_;
  LineFit chunks_{kDecay};  // a chunk's seconds against its rows
  double decode_s_ = 0.0;
  double carried_row_ = 0.0;
};

}  // namespace trt_spec
