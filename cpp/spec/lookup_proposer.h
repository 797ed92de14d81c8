// lookup_proposer.h: prompt lookup (lookup.h) as a Proposer (proposer.h). It costs no model
// pass: after every acceptance (and after a prefill) the lookup op scans the sequence's text and
// its predicted output on the device and leaves the next tree in the sequence's state, with
// SeqState::lookup_n telling the host how many nodes are ready. An iteration using lookup just
// verifies the first k of them. Per slot it keeps the sequence's acceptance of lookup
// proposals; its controller is lookup_controller.h.
#pragma once

#include <vector>

#include "spec/lookup_controller.h"
#include "spec/proposer.h"

namespace trt_spec {

class LookupProposer final : public Proposer {
 public:
  LookupProposer(int max_batch, int max_k, const DraftController* model);

  DraftSource source() const override { return DraftSource::kLookup; }
  void begin(int slot, const std::vector<int32_t>& prompt) override;
  void issue_after_accept(IterationContext& ctx) override;
  void commit(int slot, const SeqState& seq, bool used) override;

  LookupController& controller() { return controller_; }
  double alpha(int slot) const { return est_[slot].alpha(); }

 private:
  LookupController controller_;
  std::vector<AcceptanceEstimate> est_;  // [max_batch]
};

}  // namespace trt_spec
