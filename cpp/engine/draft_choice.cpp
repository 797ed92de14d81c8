// draft_choice.cpp: which draft source drafts, and how far, for the decoding sequences: whether a
// fully automatic request has the draft model read its prompt (at admission, or later once its
// own iterations say that the read pays), and each iteration's source and length from the
// proposers' controllers (scheduler.h, step 4).
#include <algorithm>
#include <cmath>

#include "engine/scheduler.h"
#include "engine/scheduler_request.h"

namespace trt_spec {

void Scheduler::admit_draft(Request& r) {
  // A fully automatic request has the draft model read its prompt only where drafting is
  // expected to save more than the read costs (DraftController::reads_prompt); otherwise it
  // decodes with lookup and plain steps. B: the batch it will decode in, the requests in slots
  // and those still queued behind it (a burst is judged at its size, not as B = 1).
  // Where the read pays against plain steps and the request may use prompt lookup, it may wait
  // (DraftController::defers): lookup may beat the draft model on this request (an edit that
  // copies its input), which only the request's own iterations tell (join_if_pays).
  const int32_t kModelBit = draft_source_bit(DraftSource::kModel);
  const int32_t kLookupBit = draft_source_bit(DraftSource::kLookup);
  if (!proposers_.model || !(r.sources & kModelBit) || r.req.draft != "auto" || r.req.draft_len)
    return;
  const int taken =
      static_cast<int>(slots_.size() - std::count(slots_.begin(), slots_.end(), nullptr));
  const int B = std::min(static_cast<int>(slots_.size()), taken + static_cast<int>(queue_.size()));
  const int P = static_cast<int>(r.req.prompt.size());
  const int N = std::min(r.req.max_new_tokens, rt_.max_seq_len() - P);
  using Read = DraftController::PromptRead;
  DraftController& mc = proposers_.model->controller();
  const int rows = proposers_.model->prompt_rows_for(P);  // the rows the draft reads
  const Read read = mc.reads_prompt(B, rows, N);
  if (read == Read::kPays && proposers_.lookup && (r.sources & kLookupBit) &&
      mc.defers(B, rows, kDeferTokens))
    r.draft_deferred = true;
  else if (read != Read::kSkip)
    return;
  r.sources &= ~kModelBit;
  r.stats.draft_model_skipped = true;
}

void Scheduler::join_if_pays(Request& r, int B, double seconds) {
  // The iteration just run (seconds: its own device time, which this sequence waited for).
  const int i = r.seq.source == static_cast<int32_t>(DraftSource::kLookup) ? 1 : 0;
  r.deferred_s[i] += seconds;
  r.deferred_tokens[i] += r.seq.n_new;
  const int n = r.deferred_tokens[0] + r.deferred_tokens[1];
  if (n < kDeferTokens) return;
  DraftController& mc = proposers_.model->controller();
  const double per_token = mc.join_saving(B, r.deferred_s[0], r.deferred_tokens[0], r.deferred_s[1],
                                          r.deferred_tokens[1]);
  // Positions [0, n_past - 1) (those of its prompt window): then the first draft step reads
  // [prev, last] as usual.
  const int upto = r.seq.n_past - 1;
  const int left =
      std::min(r.req.max_new_tokens - r.generated, rt_.max_seq_len() - 1 - r.seq.n_past);
  if (left <= 0 || upto > static_cast<int>(r.tokens.size()) ||
      !mc.catch_up_pays(B, proposers_.model->rows_up_to(r.slot, upto), left * per_token))
    return;
  mc.observe_deferral(true);
  proposers_.model->read_prompt(r.slot, r.tokens.data(), 0, upto);
  r.sources |= draft_source_bit(DraftSource::kModel);
  iter_.set_sources(r.slot, r.sources);
  r.draft_deferred = false;
  r.stats.draft_model_skipped = false;
}

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
  const int32_t kModelBit = draft_source_bit(DraftSource::kModel);
  const int32_t kLookupBit = draft_source_bit(DraftSource::kLookup);
  bool any_model = false, any_lookup = false, all_fixed = true;
  int fixed_k = 0, lag = 0;
  std::vector<double> a_model(B, 0.0), a_lookup(B, 0.0);
  std::vector<int> avail(B, 0);
  for (int b = 0; b < B; ++b) {
    const Request& r = *active[b];
    if (proposers_.model && (r.sources & kModelBit)) {
      any_model = true;
      a_model[b] = proposers_.model->alpha(r.slot);
      lag += proposers_.model->lag(r.slot, r.seq.n_past);
    }
    if (proposers_.lookup && (r.sources & kLookupBit) && r.seq.lookup_n > 0) {
      any_lookup = true;
      a_lookup[b] = proposers_.lookup->alpha(r.slot, r.seq.lookup_ngram);
      avail[b] = std::min(r.seq.lookup_n, r.max_nodes);
    }
    all_fixed = all_fixed && r.req.draft_len.has_value();
    fixed_k = std::max(fixed_k, r.req.draft_len.value_or(0));
  }
  auto lookup_tokens = [&](int k) {
    double t = 0.0;
    for (int b = 0; b < B; ++b)
      t += avail[b] > 0 ? expected_tokens(a_lookup[b], std::min(k, avail[b])) : 1.0;
    return t;
  };
  auto model_tokens = [&](int k) {
    double t = 0.0;
    for (double a : a_model) t += expected_tokens(a, k);
    return t;
  };
  DraftController* mc = proposers_.model ? &proposers_.model->controller() : nullptr;
  // Tokens emitted without the draft model cost it a catch-up later, while drafting pays: a draft
  // forward over each sequence's share (tokens: over all B sequences), cheaper per token the
  // more tokens it reads at once.
  const bool charged = mc && any_model && mc->drafting_pays(B);
  auto catch_up = [&](double tokens) {
    if (!charged) return 0.0;
    const int each = std::max(1, static_cast<int>(std::ceil(tokens / B)));
    return B * mc->catch_up_time(each);
  };
  if (all_fixed) {
    const int k = std::min(fixed_k, limit);
    if (k == 0 || (!any_model && !any_lookup)) return {};
    if (!any_lookup) return {DraftSource::kModel, k};
    if (!any_model) return {DraftSource::kLookup, k};
    const double rm = mc->rate(B, k, model_tokens(k));
    const double tl = proposers_.lookup->controller().predicted_time(B, k);
    const double rl = tl > 0.0 ? lookup_tokens(k) / (tl + catch_up(lookup_tokens(k))) : -1.0;
    return rl > rm ? Choice{DraftSource::kLookup, k} : Choice{DraftSource::kModel, k};
  }
  Choice model_choice;
  double model_rate = -1.0;
  if (any_model) {
    const int k = mc->choose(B, a_model, limit, lag);
    if (k > 0) {
      model_choice = {DraftSource::kModel, k};
      model_rate = mc->rate(B, k, model_tokens(k));
    }
  }
  if (any_lookup) {
    const LookupController::Offer o =
        proposers_.lookup->controller().offer(B, a_lookup, avail, limit, iter_.skips_padding());
    if (o.k > 0) {
      if (o.seconds <= 0.0) return {DraftSource::kLookup, o.k};  // not measured yet: measure
      const double rl = o.tokens / (o.seconds + catch_up(o.tokens));
      if (model_choice.k > 0)
        return rl > model_rate ? Choice{DraftSource::kLookup, o.k} : model_choice;
      const double t0 = predicted_time(DraftSource::kNone, B, 0);
      const double r0 = t0 > 0.0 ? B / (t0 + catch_up(B)) : -1.0;
      return rl > r0 ? Choice{DraftSource::kLookup, o.k} : Choice{};
    }
  }
  return model_choice;
}

double Scheduler::predicted_time(DraftSource source, int B, int k, bool prior) const {
  const DraftController* mc = proposers_.model ? &proposers_.model->controller() : nullptr;
  const LookupController* lc = proposers_.lookup ? &proposers_.lookup->controller() : nullptr;
  if (source == DraftSource::kLookup) return lc ? lc->predicted_time(B, k, prior) : -1.0;
  if (source == DraftSource::kModel) return mc ? mc->predicted_time(B, k, prior) : -1.0;
  const double t = mc ? mc->predicted_time(B, 0, prior) : -1.0;
  return t > 0.0 || !lc ? t : lc->predicted_time(B, 0, prior);
}

}  // namespace trt_spec
