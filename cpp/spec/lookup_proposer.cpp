// lookup_proposer.cpp: prompt lookup's hooks (lookup_proposer.h).
#include "spec/lookup_proposer.h"

namespace trt_spec {

LookupProposer::LookupProposer(int max_batch, int max_k, const DraftController* model)
    : controller_(max_batch, max_k, model), est_(max_batch) {}

void LookupProposer::begin(int slot, const std::vector<int32_t>& prompt, int /*cached*/) {
  for (int c = 0; c < LookupController::kNgramClasses; ++c)
    est_[slot][c] = controller_.prior(c + kNgramMin);
}

void LookupProposer::issue_after_accept(IterationContext& ctx) {
  ctx.ops.lookup(ctx.st, ctx.slots, ctx.B);
}

void LookupProposer::commit(int slot, const SeqState& seq, bool used) {
  if (!used || seq.n_drafted == 0) return;
  est_[slot][LookupController::ngram_class(seq.tree_ngram)].observe(seq.n_acc, seq.depth);
  controller_.observe_acceptance(seq.tree_ngram, seq.n_acc, seq.depth);
}

}  // namespace trt_spec
