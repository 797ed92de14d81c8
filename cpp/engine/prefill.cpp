// prefill.cpp: a request's way into decoding (scheduler.h, steps 2 and 3): admission into a KV
// slot (the prompt cache: the prefix a free slot holds, or one a live sequence's prompt shares,
// copied), prefill chunks and what the proposers read of them, the first token (penalties,
// constraint masks and log-probabilities on the prompt's last row) and the start of decoding.
#include <algorithm>
#include <cmath>

#include "engine/scheduler.h"
#include "engine/scheduler_request.h"

namespace trt_spec {

namespace {

// Leading tokens a cache holding `held` can give `prompt`: their common prefix, at most all but
// the prompt's last token (whose row gives the first token's logits).
int reusable_prefix(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt) {
  const int n = std::min(static_cast<int>(prompt.size()) - 1, static_cast<int>(held.size()));
  int len = 0;
  while (len < n && held[len] == prompt[len]) ++len;
  return len;
}

}  // namespace

void Scheduler::constraint_masks(TokenConstraint& con, const DraftTree* tree, uint32_t* rows,
                                 int words) {
  const int n = tree ? tree->n : 0;
  std::vector<int32_t> tokens(tree ? tree->token : nullptr, tree ? tree->token + n : nullptr);
  std::vector<int32_t> parents(n);
  for (int i = 0; i < n; ++i) parents[i] = tree->parent[i];
  con.masks(tokens, parents, MaskRows{rows, n + 1, words});
  // A row that allows nothing would leave no token to draw: it allows all instead (the
  // constraint is broken; its own error reports that).
  for (int r = 0; r <= n; ++r) {
    uint32_t* row = rows + static_cast<size_t>(r) * words;
    if (std::all_of(row, row + words, [](uint32_t w) { return w == 0; }))
      std::fill(row, row + words, ~0u);
  }
}

void Scheduler::chain_mask(TokenConstraint& con, const std::vector<int32_t>& chain, uint32_t* row,
                           int words) {
  DraftTree t;
  const int n = static_cast<int>(chain.size());
  for (int i = 0; i < n; ++i) tree_set_chain_node(t, i, chain[i], 0);
  std::vector<uint32_t> rows(static_cast<size_t>(n + 1) * words);  // [n + 1, words]
  constraint_masks(con, &t, rows.data(), words);
  std::copy_n(rows.data() + static_cast<size_t>(n) * words, words, row);
}

void Scheduler::admit(std::vector<SchedulerEvent>& events) {
  while (!queue_.empty()) {
    Request& head = *queue_.front();
    if (head.req.max_new_tokens == 0) {  // nothing to generate: done without a slot
      finish(head, FinishReason::kMaxNewTokens, event_for(head, events), now_s());
      queue_.pop_front();
      continue;
    }
    int cached = 0;
    const int slot = pick_slot(head.req.prompt, &cached);
    if (slot < 0) break;
    // A live sequence's prompt rows that share a longer prefix are copied into the slot; one
    // still prefilling such a prefix is waited for (n choices of one prompt prefill it once).
    int shared = 0, copy_from = -1;
    if (opts_.prompt_cache) {
      const int src = live_prefix(head.req.prompt, &shared);
      if (src >= 0 && shared >= cached + kMinSharedPrefix) {
        if (slots_[src]->prefilled < shared && !slots_[src]->decoding) break;  // (wait for it)
        shared = std::min(shared, slots_[src]->prefilled);
        if (shared >= cached + kMinSharedPrefix) {
          rt_.backend().kv_copy_prefix(rt_.target().kv(), src, slot, shared);
          cached = shared;
          copy_from = src;
        }
      }
    }
    std::unique_ptr<Request> r = std::move(queue_.front());
    queue_.pop_front();
    r->slot = slot;
    r->prefilled = cached;  // positions [0, cached): the slot's cache holds them
    r->stats.cached_tokens = cached;
    r->t_admit = now_s();
    r->stats.queue_s = r->t_admit - r->t_submit;
    r->tokens = r->req.prompt;
    slots_[slot] = r.get();
    // B: the batch it will decode in, the requests in slots and those still queued behind it
    // (a burst is judged at its size, not as B = 1).
    const int taken =
        static_cast<int>(slots_.size() - std::count(slots_.begin(), slots_.end(), nullptr));
    const int P = static_cast<int>(r->req.prompt.size());
    Admission a{r->req.prompt};
    a.cached = cached;
    a.copy_from = copy_from;
    a.automatic = r->req.draft == "auto" && !r->req.draft_len;
    a.batch = std::min(static_cast<int>(slots_.size()), taken + static_cast<int>(queue_.size()));
    a.new_tokens = std::min(r->req.max_new_tokens, rt_.max_seq_len() - P);
    for (const std::unique_ptr<Proposer>& p : proposers_) {
      a.allowed = (r->allowed & p->source_bit()) != 0;
      a.others = (r->allowed & ~p->source_bit()) != 0;
      p->begin(r->slot, a);
    }
    sync_sources(*r);
    live_[r->id] = std::move(r);
  }
}

int Scheduler::live_prefix(const std::vector<int32_t>& prompt, int* len) const {
  int best = -1;
  *len = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    const Request* r = slots_[s];
    if (!r || r->reason != FinishReason::kNone) continue;
    const int l = reusable_prefix(r->req.prompt, prompt);  // (cached: [0, prefilled) of it)
    if (l > *len) {
      best = s;
      *len = l;
    }
  }
  return best;
}

int Scheduler::pick_slot(const std::vector<int32_t>& prompt, int* cached) const {
  int best = -1, best_len = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    if (slots_[s]) continue;
    const int len = reusable_prefix(held_[s], prompt);
    if (best < 0 || len > best_len || (len == best_len && released_[s] < released_[best])) {
      best = s;
      best_len = len;
    }
  }
  *cached = best < 0 ? 0 : best_len;
  return best;
}

Scheduler::Chunk Scheduler::plan_chunk(int budget) {
  // Prefilling requests, oldest first.
  std::vector<Request*> pending;
  for (Request* r : slots_)
    if (r && !r->decoding) pending.push_back(r);
  std::sort(pending.begin(), pending.end(),
            [](const Request* a, const Request* b) { return a->id < b->id; });
  Chunk c;
  for (Request* r : pending) {
    if (budget <= 0) break;
    const int P = static_cast<int>(r->req.prompt.size());
    const int n = std::min(budget, P - r->prefilled);
    c.pieces.push_back({r, r->prefilled, n});
    for (int i = 0; i < n; ++i) {
      c.rows.tok.push_back(r->req.prompt[r->prefilled + i]);
      c.rows.pos.push_back(r->prefilled + i);
      c.rows.slot.push_back(r->slot);
    }
    budget -= n;
    if (r->prefilled + n == P) {
      c.rows.logit_rows.push_back(c.rows.size() - 1);
      c.completing.push_back(r);
    }
  }
  return c;
}

void Scheduler::chunk_done(const Chunk& c, int row0, bool others_decoding) {
  int row = row0;  // (the pieces' rows follow one another in the pass)
  for (const Chunk::Piece& p : c.pieces) {
    Request& r = *p.r;
    r.prefilled += p.n;
    for (const std::unique_ptr<Proposer>& q : proposers_)
      q->prompt_done(r.slot, r.req.prompt, p.first, p.n, row, others_decoding);
    row += p.n;
  }
}

void Scheduler::first_tokens(const Chunk& c, const float* logits,
                             std::vector<SchedulerEvent>& events) {
  // Drawn as target-only decoding draws them (sampling step 0).
  Backend& be = rt_.backend();
  const int m = static_cast<int>(c.completing.size());
  std::vector<int32_t> cslots(m), first(m);
  for (int i = 0; i < m; ++i) {
    cslots[i] = c.completing[i]->slot;
    SamplingState st{c.completing[i]->req.sampling, 0};
    be.upload(iter_.state().states + cslots[i], &st, sizeof(st));
  }
  be.upload(sample_slots_.as<void>(), cslots.data(), m * 4);
  // Penalties: each new sequence's state (once any request has used them), then the prompts'
  // last rows penalized as every later row is.
  const bool any_pen = std::any_of(c.completing.begin(), c.completing.end(),
                                   [](const Request* r) { return r->penalized(); });
  if (any_pen || iter_.has_penalties())
    for (const Request* r : c.completing) iter_.set_penalties(r->slot, r->penalties, r->req.prompt);
  if (any_pen) iter_.penalize_rows(sample_slots_.as<int32_t>(), m, const_cast<float*>(logits));
  // Constraints: each constrained prompt's last row masked (the others' rows allow all).
  const bool any_mask = std::any_of(c.completing.begin(), c.completing.end(),
                                    [](const Request* r) { return r->constrained(); });
  if (any_mask) {
    const int W = iter_.mask_words();
    std::vector<uint32_t> masks(static_cast<size_t>(m) * W, ~0u);
    for (int i = 0; i < m; ++i)
      if (const auto& con = c.completing[i]->req.constraint)
        constraint_masks(*con, nullptr, masks.data() + static_cast<size_t>(i) * W, W);
    iter_.mask_rows(const_cast<float*>(logits), m, masks);
  }
  be.sample(logits, m, rt_.vocab_size(), sample_slots_.as<int32_t>(), iter_.state().states,
            sampled_.as<int32_t>());
  const bool any_lp = std::any_of(c.completing.begin(), c.completing.end(),
                                  [](const Request* r) { return r->wants_logprobs(); });
  std::vector<TokenLogprob> lp;
  if (any_lp) {
    be.logprobs(logits, rt_.vocab_size(), m, first_rows_.as<int32_t>(), sampled_.as<int32_t>(),
                sample_slots_.as<int32_t>(), iter_.state().states, first_lp_.as<TokenLogprob>());
    lp.resize(static_cast<size_t>(m) * kLogprobEntries);
    be.download(lp.data(), first_lp_.as<void>(), lp.size() * sizeof(TokenLogprob));
  }
  be.download(first.data(), sampled_.as<void>(), m * 4);
  take_prefill_time();  // (synchronised: free)
  for (int i = 0; i < m; ++i)
    start_decoding(*c.completing[i], first[i], any_lp ? lp.data() + i * kLogprobEntries : nullptr,
                   events);
}

int Scheduler::prefill(std::vector<SchedulerEvent>& events, bool others_decoding) {
  Backend& be = rt_.backend();
  const int R = rt_.target().limits().max_rows;
  const Chunk c =
      plan_chunk(std::min(R, others_decoding ? pacer_.interleave_rows() : opts_.prefill_chunk));
  if (c.pieces.empty()) return 0;
  const int n = c.rows.size();
  last_prefill_rows_ = n;
  // The chunk's device time, for the pacer: read after the next synchronisation (this chunk's
  // first tokens, or the decode iteration's read-back). An earlier chunk's time still unread is
  // read now where that is free (ops run in order on the host), else dropped.
  if (prefill_timed_rows_ > 0 && be.runs_on_host()) take_prefill_time();
  if (!prefill_timer_) prefill_timer_ = be.timer();
  prefill_timer_->start();
  const std::vector<int32_t>& lrows = c.rows.logit_rows;
  be.upload(tok_.as<void>(), c.rows.tok.data(), n * 4);
  be.upload(pos_.as<void>(), c.rows.pos.data(), n * 4);
  be.upload(row_slot_.as<void>(), c.rows.slot.data(), n * 4);
  if (!lrows.empty()) be.upload(logit_rows_.as<void>(), lrows.data(), lrows.size() * 4);
  Rows rows{tok_.as<int32_t>(), pos_.as<int32_t>(), row_slot_.as<int32_t>()};
  rows.prompt_from = 0;  // every row reads a prompt
  rt_.target().forward(rows, n, logit_rows_.as<int32_t>(), static_cast<int>(lrows.size()),
                       logits_.as<float>());
  chunk_done(c, 0, others_decoding);
  prefill_timer_->stop();
  prefill_timed_rows_ = n;
  if (c.completing.empty()) return 0;
  first_tokens(c, logits_.as<float>(), events);
  return static_cast<int>(c.completing.size());
}

void Scheduler::start_decoding(Request& r, int32_t first, const TokenLogprob* lp,
                               std::vector<SchedulerEvent>& events) {
  const int P = static_cast<int>(r.req.prompt.size());
  sync_sources(r);
  SeqState s{};
  s.sources = r.sources;
  s.max_nodes = r.max_nodes;
  s.pred_len = static_cast<int32_t>(r.req.prediction.size());
  s.n_past = P;
  s.last = first;
  s.prev = r.req.prompt.back();
  s.n_gen = 1;
  for (const std::unique_ptr<Proposer>& p : proposers_) p->start(r.slot, s);
  r.seq = s;
  r.tokens.push_back(first);
  r.decoding = true;
  if (r.req.constraint) r.req.constraint->commit({first});
  // (A prompt that fills the cache leaves no position for the first token: no iteration.)
  if (P < rt_.max_seq_len())
    iter_.start(r.slot, s, SamplingState{r.req.sampling, 1}, r.tokens, r.req.prediction);
  const double now = now_s();
  r.stats.prefill_s = now - r.t_admit;
  r.stats.ttft_s = now - r.t_submit;
  SchedulerEvent& ev = event_for(r, events);
  if (!emit(r, first, ev, now, lp))
    finish(r, r.reason, ev, now);
  else if (P >= rt_.max_seq_len())
    finish(r, FinishReason::kMaxSeqLen, ev, now);
  else
    ev.text += r.stop.ready();
}

}  // namespace trt_spec
