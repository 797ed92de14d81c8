// head_offers.cpp: a draft head's offers and what it learns (head_offers.h).
#include "spec/head_offers.h"

#include <algorithm>

namespace trt_spec {

HeadOffers::HeadOffers(DraftSource source, int max_batch, int max_k)
    : source_(source), controller_(max_batch, max_k, nullptr) {
  est_.resize(max_batch);
  measured_.assign(max_batch + 1, 0);
}

bool HeadOffers::pick(const OfferQuery& q, std::vector<double>& a, std::vector<int>& avail) const {
  a.assign(q.B(), 0.0);
  avail.assign(q.B(), 0);
  bool any = false;
  for (int b = 0; b < q.B(); ++b) {
    if (!(q.seqs[b].sources & draft_source_bit(source_))) continue;
    any = true;
    a[b] = est_[q.seqs[b].slot].alpha();
    avail[b] = q.seqs[b].max_nodes;
  }
  return any;
}

Offer HeadOffers::offer(const OfferQuery& q) {
  std::vector<double> a;
  std::vector<int> avail;
  if (!pick(q, a, avail)) return {};
  const int B = q.B();
  if (!measured_[B]) {  // no iteration of B sequences yet: the heads' cost is unknown
    const int k = std::min(
        {LookupController::kFirstK, q.limit, *std::max_element(avail.begin(), avail.end())});
    return Offer{k, expected_batch_tokens(a, avail, k), -1.0, true, false};
  }
  const LookupController::Offer o = controller_.offer(B, a, avail, q.limit, q.compact);
  if (o.k == 0) return {};
  return Offer{o.k, o.tokens, o.seconds, o.seconds <= 0.0, false};
}

Offer HeadOffers::offer_fixed(const OfferQuery& q, int k) {
  std::vector<double> a;
  std::vector<int> avail;
  if (!pick(q, a, avail)) return {};
  return Offer{k, expected_batch_tokens(a, avail, k), controller_.predicted_time(q.B(), k), false,
               false};
}

void HeadOffers::observe_iteration(const IterationCost& c) {
  if (c.source == source_) {
    controller_.observe(c.B, c.k, c.total_s, c.rows);
    if (c.B < static_cast<int>(measured_.size())) measured_[c.B] = 1;
  } else if (c.k == 0) {
    controller_.observe_plain(c.B, c.total_s);
  }
}

void HeadOffers::commit(int slot, const SeqState& seq, bool used) {
  if (!used || seq.n_drafted == 0) {  // nothing observed: back toward the long-run mean
    est_[slot].relax(long_run_.alpha());
    return;
  }
  est_[slot].observe(seq.n_acc, seq.depth);
  long_run_.observe(seq.n_acc, seq.depth, 0.99);
}

}  // namespace trt_spec
