// lookup_proposer.h: prompt lookup (lookup.h) as a Proposer (proposer.h). It costs no model
// pass: after every acceptance (and after a prefill) the lookup op (lookup_ops.h) scans the
// sequence's text and its predicted output on the device and leaves the next tree in the
// sequence's state, with SeqState::ready_n telling the host how many nodes are ready. An
// iteration using lookup just verifies the first k of them. Per slot it keeps the sequence's
// acceptance of lookup proposals, one estimate per length of the n-gram they continue (the
// tree's tag: DraftTree::tag); its controller is lookup_controller.h.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "spec/lookup_controller.h"
#include "spec/lookup_ops.h"
#include "spec/proposer.h"

namespace trt_spec {

class LookupProposer final : public Proposer {
 public:
  LookupProposer(Backend& be, int max_batch, int max_k, const DraftController* model);

  DraftSource source() const override { return DraftSource::kLookup; }
  void begin(int slot, const Admission& a) override;
  Offer offer(const OfferQuery& q) override;
  Offer offer_fixed(const OfferQuery& q, int k) override;
  double predicted_time(int B, int k, bool prior = true) const override {
    return controller_.predicted_time(B, k, prior);
  }
  void observe_iteration(const IterationCost& c) override;
  void issue_after_accept(IterationContext& ctx) override;
  void commit(int slot, const SeqState& seq, bool used) override;
  // A chain of the certain tokens becomes the slot's ready tree (tagged kCertainTag), offered at
  // acceptance kCertainAlpha.
  void certain(int slot, const std::vector<int32_t>& tokens, SeqState& seq) override;
  static constexpr int32_t kCertainTag = -1;
  static constexpr double kCertainAlpha = 0.99;

  LookupController& controller() { return controller_; }
  // The slot's acceptance of proposals continuing an n-gram of length ngram.
  double alpha(int slot, int ngram) const {
    return est_[slot][LookupController::ngram_class(ngram)].alpha();
  }

 private:
  // Sequences of the query with lookup nodes ready: their acceptance and ready nodes (0 for the
  // others); false when none has any.
  bool ready(const OfferQuery& q, std::vector<double>& a, std::vector<int>& avail) const;
  using Estimates = std::array<AcceptanceEstimate, LookupController::kNgramClasses>;
  Backend& be_;
  int max_k_;
  SeqState* seqs_ = nullptr;  // the iteration's states (backend memory; from its contexts)
  std::unique_ptr<LookupOps> ops_;
  LookupController controller_;
  std::vector<Estimates> est_;  // [max_batch]
};

// The registry's factory: prompt lookup, in every engine with a draft length; it prices its verify
// passes on the controller of a proposer made before it that measures them (the draft model's).
std::unique_ptr<Proposer> make_lookup_proposer(const ProposerEnv& env);

}  // namespace trt_spec
