// draft_choice.cpp: which draft source drafts, and how far, for the decoding sequences
// (scheduler.h, step 4): the best of the proposers' offers, "no draft" (a plain target step) among
// them.
//
// Each proposer offers k nodes per sequence, the tokens it expects the iteration to emit and its
// predicted seconds (proposer.h). An offer's rate is tokens / (seconds + the charges of the other
// proposers: what emitting those tokens without them costs them later, the draft model's
// catch-up). A probe (an offer whose cost is unknown) runs first, to be measured; otherwise the
// best rate wins, ties to the earlier proposer in the registry, and where no proposer weighed its
// offer against a plain step itself, the plain step's rate (B tokens over its predicted seconds
// and every proposer's charge) must be beaten by kPlainMargin. Requests that all fixed their
// draft length get exactly that length from whichever proposer prices it best.
#include <algorithm>
#include <cmath>

#include "engine/scheduler.h"
#include "engine/scheduler_request.h"

namespace trt_spec {

Scheduler::Choice Scheduler::choose(const std::vector<Request*>& active) {
  // Room: verify writes cache indices up to n_past + k (< max_seq_len); drafting past the most
  // tokens any sequence may still emit is wasted.
  int limit = rt_.max_draft_len(), most_left = 0;
  for (const Request* r : active) {
    limit = std::min(limit, rt_.max_seq_len() - 1 - r->seq.n_past);
    most_left = std::max(most_left, r->req.max_new_tokens - r->generated);
  }
  limit = std::max(0, std::min(limit, most_left - 1));
  if (limit == 0) return {};
  const int B = static_cast<int>(active.size());
  OfferQuery q;
  q.limit = limit;
  q.compact = iter_.skips_padding();
  bool all_fixed = true;
  int fixed_k = 0;
  for (const Request* r : active) {
    q.seqs.push_back(OfferSeq{r->slot, &r->seq, r->max_nodes, r->sources});
    all_fixed = all_fixed && r->req.draft_len.has_value();
    fixed_k = std::max(fixed_k, r->req.draft_len.value_or(0));
  }
  const int k_fixed = std::min(fixed_k, limit);
  if (all_fixed && k_fixed == 0) return {};
  struct Entry {
    const Proposer* p;
    Offer o;
  };
  std::vector<Entry> offers;
  for (const std::unique_ptr<Proposer>& p : proposers_) {
    const Offer o = all_fixed ? p->offer_fixed(q, k_fixed) : p->offer(q);
    if (o.k > 0) offers.push_back({p.get(), o});
  }
  if (offers.empty()) return {};
  // Seconds that `tokens` tokens emitted without the proposers other than `self` cost them.
  auto charges = [&](const Proposer* self, double tokens) {
    double c = 0.0;
    for (const std::unique_ptr<Proposer>& p : proposers_)
      if (p.get() != self) c += p->charge(q, tokens);
    return c;
  };
  auto rate = [&](const Entry& e) {
    return e.o.seconds > 0.0 ? e.o.tokens / (e.o.seconds + charges(e.p, e.o.tokens)) : -1.0;
  };
  if (all_fixed && offers.size() == 1) return {offers[0].p->source(), offers[0].o.k};
  if (!all_fixed)
    for (const Entry& e : offers)
      if (e.o.probe) return {e.p->source(), e.o.k};  // not measured yet: measure
  const Entry* best = nullptr;
  double best_rate = 0.0;
  bool weighed = all_fixed;  // (a fixed length is the requests' own choice)
  for (const Entry& e : offers) {
    const double r = rate(e);
    if (!best || r > best_rate) {
      best = &e;
      best_rate = r;
    }
    weighed = weighed || e.o.weighed_plain;
  }
  if (!weighed) {
    const double t0 = predicted_time(DraftSource::kNone, B, 0);
    const double r0 = t0 > 0.0 ? B / (t0 + charges(nullptr, B)) : -1.0;
    // The margin on the offer's own tokens and seconds against the plain step's: the charges,
    // the same per token for both, would dilute it (a near-tie goes to the plain step).
    const bool clears = !(t0 > 0.0 && best->o.seconds > 0.0) ||
                        best->o.tokens / best->o.seconds > kPlainMargin * B / t0;
    if (!(best_rate > r0) || !clears) return {};
  }
  return {best->p->source(), best->o.k};
}

double Scheduler::predicted_time(DraftSource source, int B, int k, bool prior) const {
  if (source != DraftSource::kNone) {
    const Proposer* p = proposer(source);
    return p ? p->predicted_time(B, k, prior) : -1.0;
  }
  // A plain step: the first proposer that can say.
  double t = -1.0;
  for (const std::unique_ptr<Proposer>& p : proposers_) {
    t = p->predicted_time(B, 0, prior);
    if (t > 0.0) return t;
  }
  return t;
}

}  // namespace trt_spec
