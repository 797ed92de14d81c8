// lookup_controller.h: prompt lookup's draft-length controller: how many of the nodes lookup has
// ready (SeqState::ready_n) to verify, from measured costs and each sequence's running
// acceptance of lookup proposals.
//
// Model: a sequence with lookup acceptance a (its acceptance of proposals that continued an n-gram
// as long as the one behind its nodes) and m nodes ready, verifying min(k, m) of them,
// emits on average E(a, min(k, m)) tokens (acceptance.h; a tree's first nodes are mostly its main
// chain); one with no nodes emits 1. An iteration of B sequences verifying k + 1 rows each takes
// T(B, k): the running average of measured lookup iterations with that k; otherwise the draft
// model controller's verify time for k + 1 rows (the same target pass), when there is one;
// otherwise interpolated between two measured k of B (k = 0: plain target steps); otherwise
// (an engine without a draft model, a B that measured one k) a line of this controller's
// iterations' seconds against their rows B (k + 1), over every B (spec/line_fit.h), since one
// measured k says nothing about what a row costs (~0.1 of a step on a GPU, ~0.3 on a CPU).
// The offer is the k in [1, k_limit] with the most tokens per second. Until a cost is known the
// first offer is kFirstK; every kExplore lookup iterations a neighbour of the best k is offered to
// keep the measured costs current.
#pragma once

#include <algorithm>
#include <vector>

#include "spec/acceptance.h"
#include "spec/draft_controller.h"
#include "spec/line_fit.h"
#include "spec/lookup.h"

namespace trt_spec {

class LookupController {
 public:
  // model: the draft model's controller (its verify costs), or null.
  LookupController(int max_batch, int max_k, const DraftController* model);

  struct Offer {
    int k = 0;              // nodes per sequence to verify; 0: nothing to offer
    double tokens = 0.0;    // expected tokens emitted (all sequences)
    double seconds = -1.0;  // predicted iteration time; < 0: not known yet (measure it)
  };
  // alphas[b], available[b]: each sequence's lookup acceptance and ready nodes (0: none).
  // compact: the verify pass computes only each sequence's root and ready nodes
  // (Iteration::compact_rows), so a k that pads some sequences is priced at the rows it
  // computes, sum_b 1 + min(k, available[b]), on the cross-B line of passes.
  Offer offer(int B, const std::vector<double>& alphas, const std::vector<int>& available,
              int k_limit, bool compact = false);
  // A lookup iteration of B sequences with k nodes took total_s seconds; rows: the verify rows
  // its pass computed (< 0: B (k + 1)); one that skipped padding rows feeds only the line.
  void observe(int B, int k, double total_s, int rows = -1);
  // Seconds of a pass of `rows` rows in all, from the cross-B lines (the draft model
  // controller's where there is one); -1 until a line can say.
  double pass_time(int rows) const;
  // A plain target step (k = 0) of B sequences.
  void observe_plain(int B, double total_s) { observe(B, 0, total_s); }
  // The long-run acceptance of proposals continuing an n-gram of length ngram (lookup.h: a
  // longer match is right more often), the prior of new requests.
  void observe_acceptance(int ngram, int n_accepted, int depth) {
    long_run_[ngram_class(ngram)].observe(n_accepted, depth, kLongDecay);
  }
  AcceptanceEstimate prior(int ngram) const;
  double long_run_alpha(int ngram) const { return long_run_[ngram_class(ngram)].alpha(); }
  // The estimates' index of an n-gram length: 1 .. kNgramMax -> 0 .. kNgramMax - 1.
  static int ngram_class(int ngram) { return std::clamp(ngram, kNgramMin, kNgramMax) - kNgramMin; }
  static constexpr int kNgramClasses = kNgramMax - kNgramMin + 1;
  // T(B, k) as described above; prior: whether the model's verify time may come from its
  // cross-B prior (draft_controller.h) for a B with no verify pass of its own.
  double predicted_time(int B, int k, bool prior = true) const;

  static constexpr int kFirstK = 4;
  static constexpr int kExplore = 16;
  static constexpr double kEma = 0.25;
  static constexpr double kLongDecay = 0.99;

 private:
  struct Costs {
    AgedCosts total;  // [max_k + 1] seconds per iteration verifying k nodes (aged per iteration)
    int since_probe = 0, probes = 0;
  };
  int max_k_;
  const DraftController* model_;
  std::vector<Costs> costs_;  // [max_batch + 1]
  AcceptanceEstimate long_run_[kNgramClasses];
  LineFit passes_{DraftController::kFitDecay};  // iteration seconds against rows, any B
};

}  // namespace trt_spec
