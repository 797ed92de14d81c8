// draft_controller.h: draft_len="auto": picks the draft length k of each iteration from the
// measured costs and the running acceptance.
//
// Model: with per-token acceptance a, an iteration drafting k tokens emits on average
//   E(a, k) = 1 + a + .. + a^k = (1 - a^(k+1)) / (1 - a)
// tokens per sequence and takes T(B, k) seconds for B sequences. The controller picks the k in
// [0, k_limit] that maximises sum_b E(a_b, k) / T(B, k); k = 0 is a plain target step.
// T(B, k) is the running average of measured iterations where k has run; otherwise, on a
// backend that times phases (CPU), k * draft_step(B) + verify(B, k + 1 rows) from measured
// phases, verify times of unmeasured row counts interpolated; otherwise interpolated between
// measured k. The first iterations measure what the model needs (kFirstK, then k = 0); then a
// neighbour of the best k is measured again every so often, less often while the best is 0
// (drafting again then costs the draft a catch-up over the tokens it skipped).
#pragma once

#include <vector>

namespace trt_spec {

// Running per-token acceptance of one sequence: decaying counts over a prior.
struct AcceptanceEstimate {
  double accepted = 3.0, rejected = 1.0;
  void observe(int n_accepted, int k);
  double alpha() const { return accepted / (accepted + rejected); }
};

double expected_tokens(double alpha, int k);

class DraftController {
 public:
  DraftController(int max_batch, int max_k);

  // k for the next iteration of B sequences with acceptances alphas[b], at most k_limit.
  int choose(int B, const std::vector<double>& alphas, int k_limit);
  // Records an iteration: its total time, and its phases when measured (draft_s < 0: not).
  void observe(int B, int k, double total_s, double draft_s, double verify_s);
  // Records the accepted length of one sequence (for the prior of later requests).
  void observe_acceptance(int n_accepted, int k);
  // The estimate a new request starts from: the acceptance of recent requests, weight 4.
  AcceptanceEstimate prior() const;

  // The model's iteration time; negative when not enough is measured for B yet.
  double predicted_time(int B, int k) const;

  static constexpr int kFirstK = 4;
  static constexpr int kExplore = 16;
  static constexpr int kMaxExplore = 256;
  static constexpr double kEma = 0.25;

 private:
  struct Costs {
    double draft_step = -1.0;    // seconds per draft step (phase-timed backends)
    std::vector<double> verify;  // [max_k + 2]: seconds per verify pass of m rows; -1 unknown
    std::vector<double> total;   // [max_k + 1]: seconds per iteration with k drafts
    int since_probe = 0, probe_every = kExplore, probes = 0;
  };
  int max_k_;
  std::vector<Costs> costs_;  // [max_batch + 1]
  AcceptanceEstimate recent_;
};

}  // namespace trt_spec
