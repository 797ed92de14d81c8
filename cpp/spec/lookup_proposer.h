// lookup_proposer.h: prompt lookup (lookup.h) as a Proposer (proposer.h). It costs no model
// pass: after every acceptance (and after a prefill) the lookup op scans the sequence's text and
// its predicted output on the device and leaves the next tree in the sequence's state, with
// SeqState::lookup_n telling the host how many nodes are ready. An iteration using lookup just
// verifies the first k of them. Per slot it keeps the sequence's acceptance of lookup
// proposals, one estimate per length of the n-gram they continue (SeqState::lookup_ngram); its
// controller is lookup_controller.h.
#pragma once

#include <array>
#include <vector>

#include "spec/lookup_controller.h"
#include "spec/proposer.h"

namespace trt_spec {

class LookupProposer final : public Proposer {
 public:
  LookupProposer(int max_batch, int max_k, const DraftController* model);

  DraftSource source() const override { return DraftSource::kLookup; }
  void begin(int slot, const std::vector<int32_t>& prompt, int cached) override;
  void issue_after_accept(IterationContext& ctx) override;
  void commit(int slot, const SeqState& seq, bool used) override;

  LookupController& controller() { return controller_; }
  // The slot's acceptance of proposals continuing an n-gram of length ngram.
  double alpha(int slot, int ngram) const {
    return est_[slot][LookupController::ngram_class(ngram)].alpha();
  }

 private:
  using Estimates = std::array<AcceptanceEstimate, LookupController::kNgramClasses>;
  LookupController controller_;
  std::vector<Estimates> est_;  // [max_batch]
};

}  // namespace trt_spec
