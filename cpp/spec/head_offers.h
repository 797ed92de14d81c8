// head_offers.h: what a draft head's proposer (Medusa's, EAGLE-3's: a proposal made on the device
// from the target's own hidden states, whose cost no other measurement holds) offers, and how it
// learns.
//
// Each sequence's acceptance is a running estimate (acceptance.h) of the proposals it verified,
// starting from the long-run mean of all of them. The draft length is chosen by prompt lookup's
// controller (lookup_controller.h: tokens per second over measured iterations of the source, per
// batch size and length, interpolated between measured lengths), with every node up to the
// request's cap ready. A batch size with no iteration of the source yet is offered at
// LookupController::kFirstK as a probe: running it is the only way to learn its cost.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/acceptance.h"
#include "spec/lookup_controller.h"
#include "spec/proposer.h"

namespace trt_spec {

class HeadOffers {
 public:
  // source: the proposer's draft source.
  HeadOffers(DraftSource source, int max_batch, int max_k);

  void begin(int slot) { est_[slot] = long_run_.with_weight(4.0); }
  Offer offer(const OfferQuery& q);
  Offer offer_fixed(const OfferQuery& q, int k);
  double predicted_time(int B, int k, bool prior = true) const {
    return controller_.predicted_time(B, k, prior);
  }
  void observe_iteration(const IterationCost& c);
  // used: the slot's iteration verified this source's tree.
  void commit(int slot, const SeqState& seq, bool used);

 private:
  // The sequences of q that use the source: their acceptance and nodes; false: none.
  bool pick(const OfferQuery& q, std::vector<double>& a, std::vector<int>& avail) const;

  DraftSource source_;
  LookupController controller_;
  AcceptanceEstimate long_run_;
  std::vector<AcceptanceEstimate> est_;  // [max_batch]
  std::vector<char> measured_;           // [max_batch + 1]: an iteration of B ran
};

// A draft head's proposer: the engine's draft (source "model") with a head's offers.
class HeadProposer : public Proposer {
 public:
  HeadProposer(int max_batch, int max_k) : offers_(DraftSource::kModel, max_batch, max_k) {}

  DraftSource source() const override { return DraftSource::kModel; }
  void begin(int slot, const Admission& a) override { offers_.begin(slot); }
  Offer offer(const OfferQuery& q) override { return offers_.offer(q); }
  Offer offer_fixed(const OfferQuery& q, int k) override { return offers_.offer_fixed(q, k); }
  double predicted_time(int B, int k, bool prior = true) const override {
    return offers_.predicted_time(B, k, prior);
  }
  void observe_iteration(const IterationCost& c) override { offers_.observe_iteration(c); }
  void commit(int slot, const SeqState& seq, bool used) override {
    offers_.commit(slot, seq, used);
  }

 protected:
  HeadOffers offers_;
};

}  // namespace trt_spec
