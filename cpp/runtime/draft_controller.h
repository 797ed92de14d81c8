// draft_controller.h: draft_len="auto": picks the draft length k of each iteration from the
// measured costs and the running acceptance.
//
// Model: with per-token acceptance a, an iteration drafting k tokens emits on average
//   E(a, k) = 1 + a + .. + a^k = (1 - a^(k+1)) / (1 - a)
// tokens per sequence and costs T(B, k) = k * draft_step(B) + verify(B, k + 1 rows) seconds.
// The controller picks the k in [0, k_max] that maximises sum_b E(a_b, k) / T(B, k); k = 0 is
// a plain target step. Costs are running averages of measured phases (per batch size B);
// verify times of row counts not measured yet are interpolated or extrapolated from the
// measured ones. The first iterations measure what the model needs: kFirstK, then k = 0; every
// kExplore iterations a neighbour of the best k is measured again.
#pragma once

#include <vector>

namespace trt_spec {

// Running per-token acceptance of one sequence (decaying counts, with a prior).
struct AcceptanceEstimate {
  double accepted = 3.0, rejected = 1.0;  // prior: a = 0.75
  void observe(int n_accepted, int k);
  double alpha() const { return accepted / (accepted + rejected); }
};

double expected_tokens(double alpha, int k);

class DraftController {
 public:
  DraftController(int max_batch, int max_k);

  // k for the next iteration of B sequences with acceptances alphas[b], at most k_limit.
  int choose(int B, const std::vector<double>& alphas, int k_limit);
  // Records an iteration's measured phases.
  void observe(int B, int k, double draft_s, double verify_s);
  // The model's iteration time; negative when nothing is measured for B yet.
  double predicted_time(int B, int k) const;
  double draft_step_s(int B) const { return costs_[B].draft_step; }
  double verify_s(int B, int rows) const;

  static constexpr int kExplore = 24;
  static constexpr int kFirstK = 4;
  static constexpr double kEma = 0.25;

 private:
  struct Costs {
    double draft_step = -1.0;     // seconds per draft step
    std::vector<double> verify;   // [max_k + 2]: seconds per verify pass of m rows; -1 unknown
    int iterations = 0;
  };
  int max_k_;
  std::vector<Costs> costs_;  // [max_batch + 1]
};

}  // namespace trt_spec
