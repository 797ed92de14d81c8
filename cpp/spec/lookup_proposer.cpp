// lookup_proposer.cpp: prompt lookup's hooks and offers (lookup_proposer.h).
#include "spec/lookup_proposer.h"

#include <algorithm>
#include <cstddef>

namespace trt_spec {

LookupProposer::LookupProposer(Backend& be, int max_batch, int max_k, const DraftController* model)
    : be_(be),
      max_k_(max_k),
      ops_(make_lookup_ops(be)),
      controller_(max_batch, max_k, model),
      est_(max_batch) {}

void LookupProposer::begin(int slot, const Admission& a) {
  for (int c = 0; c < LookupController::kNgramClasses; ++c)
    est_[slot][c] = controller_.prior(c + kNgramMin);
}

bool LookupProposer::ready(const OfferQuery& q, std::vector<double>& a,
                           std::vector<int>& avail) const {
  a.assign(q.B(), 0.0);
  avail.assign(q.B(), 0);
  bool any = false;
  for (int b = 0; b < q.B(); ++b) {
    const SeqState& s = *q.seqs[b].seq;
    if (!q.seqs[b].uses(*this) || s.ready_n <= 0) continue;
    any = true;
    a[b] = s.tree.tag == kCertainTag ? kCertainAlpha : alpha(q.seqs[b].slot, s.tree.tag);
    avail[b] = std::min(s.ready_n, q.seqs[b].max_nodes);
  }
  return any;
}

Offer LookupProposer::offer(const OfferQuery& q) {
  std::vector<double> a;
  std::vector<int> avail;
  if (!ready(q, a, avail)) return {};
  const LookupController::Offer o = controller_.offer(q.B(), a, avail, q.limit, q.compact);
  if (o.k == 0) return {};
  return Offer{o.k, o.tokens, o.seconds, o.seconds <= 0.0, false};
}

Offer LookupProposer::offer_fixed(const OfferQuery& q, int k) {
  std::vector<double> a;
  std::vector<int> avail;
  if (!ready(q, a, avail)) return {};
  return Offer{k, expected_batch_tokens(a, avail, k), controller_.predicted_time(q.B(), k), false,
               false};
}

void LookupProposer::observe_iteration(const IterationCost& c) {
  if (c.source == source())
    controller_.observe(c.B, c.k, c.total_s, c.rows);
  else if (c.k == 0)
    controller_.observe_plain(c.B, c.total_s);
}

void LookupProposer::issue_after_accept(IterationContext& ctx) {
  seqs_ = ctx.st.seqs;
  ops_->lookup(ctx.st, ctx.slots, ctx.B);
}

void LookupProposer::certain(int slot, const std::vector<int32_t>& tokens, SeqState& seq) {
  const int n = std::min(static_cast<int>(tokens.size()), max_k_);
  if (n <= 0 || !seqs_) return;
  DraftTree t;
  for (int i = 0; i < n; ++i) tree_set_chain_node(t, i, tokens[i], 0);  // (one-hot nodes)
  t.tag = kCertainTag;
  seq.tree = t;
  seq.ready_n = n;
  SeqState* d = seqs_ + slot;
  be_.upload(reinterpret_cast<char*>(d) + offsetof(SeqState, tree), &t, sizeof(DraftTree));
  be_.upload(reinterpret_cast<char*>(d) + offsetof(SeqState, ready_n), &seq.ready_n, 4);
}

void LookupProposer::commit(int slot, const SeqState& seq, bool used) {
  if (!used || seq.n_drafted == 0 || seq.last_tag == kCertainTag) return;
  est_[slot][LookupController::ngram_class(seq.last_tag)].observe(seq.n_acc, seq.depth);
  controller_.observe_acceptance(seq.last_tag, seq.n_acc, seq.depth);
}

std::unique_ptr<Proposer> make_lookup_proposer(const ProposerEnv& env) {
  if (env.max_k == 0) return nullptr;
  const DraftController* costs = nullptr;
  for (const std::unique_ptr<Proposer>& p : env.made)
    if (!costs) costs = p->verify_costs();
  return std::make_unique<LookupProposer>(env.be, env.max_batch, env.max_k, costs);
}

}  // namespace trt_spec
