// scheduler.cpp: request lives, chunked prefill, the decode iteration, stops and statistics
// (scheduler.h; the choice of draft source and length: draft_choice.cpp).
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>

#include "common/errors.h"
#include "engine/scheduler_request.h"

namespace trt_spec {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr char kSourceLetters[kDraftSourceCount] = {'n', 'm', 'l'};

}  // namespace

Scheduler::Scheduler(Runtime& rt, SchedulerOptions opts)
    : rt_(rt),
      opts_(std::move(opts)),
      iter_(rt.backend(), rt.target(), rt.draft(), rt.max_batch(), rt.max_draft_len(),
            rt.max_seq_len()),
      pacer_(opts_.interleave_chunk) {
  if (opts_.prefill_chunk < 1 || opts_.interleave_chunk < 1)
    throw InvalidArgument("prefill chunks must be >= 1 row");
  if (!opts_.token_bytes.empty() && static_cast<int>(opts_.token_bytes.size()) != rt.vocab_size())
    throw InvalidArgument("the token byte table has " + std::to_string(opts_.token_bytes.size()) +
                          " entries for a vocabulary of " + std::to_string(rt.vocab_size()));
  const int B = rt.max_batch(), K = rt.max_draft_len();
  if (opts_.draft_window < 0)
    throw InvalidArgument("draft_window must be >= 0 (0: the whole prompt), got " +
                          std::to_string(opts_.draft_window));
  if (opts_.draft_read_chunk < 0)
    throw InvalidArgument("draft_read_chunk must be >= 0 (0: with the prefill), got " +
                          std::to_string(opts_.draft_read_chunk));
  proposers_ = attach_proposers(iter_, rt.backend(), rt.file(), rt.target(), rt.draft(), B, K,
                                ProposerOptions{opts_.draft_window, opts_.draft_read_chunk});
  // draft="model" asks for the engine's draft, whatever its kind.
  limits_ =
      RequestLimits{rt.vocab_size(), rt.max_seq_len(), K, proposer(DraftSource::kModel) != nullptr};
  slots_.assign(B, nullptr);
  held_.assign(B, {});
  released_.assign(B, 0);
  Backend& be = rt.backend();
  const int R = rt.target().limits().max_rows;
  tok_ = BackendBuffer(be, R * 4);
  pos_ = BackendBuffer(be, R * 4);
  row_slot_ = BackendBuffer(be, R * 4);
  logit_rows_ = BackendBuffer(be, R * 4);
  logits_ = BackendBuffer(be, static_cast<size_t>(B) * rt.vocab_size() * 4);
  sample_slots_ = BackendBuffer(be, B * 4);
  sampled_ = BackendBuffer(be, B * 4);
  first_rows_ = BackendBuffer(be, B * 4);
  first_lp_ = BackendBuffer(be, static_cast<size_t>(B) * kLogprobEntries * sizeof(TokenLogprob));
  std::vector<int32_t> id(B);
  for (int i = 0; i < B; ++i) id[i] = i;
  be.upload(first_rows_.as<void>(), id.data(), B * 4);
}

Scheduler::~Scheduler() = default;

int Scheduler::running() const {
  return static_cast<int>(live_.size());
}

uint64_t Scheduler::submit(GenerateRequest req) {
  validate_request(req, limits_);
  if (!req.stop_strings.empty() && opts_.token_bytes.empty())
    throw InvalidArgument("stop strings need the engine's tokenizer (no token text table given)");
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->allowed = request_sources(req, limits_);
  r->max_nodes = request_max_nodes(req, limits_);
  r->penalties = request_penalties(req);
  r->stop = StopMatcher(req.stop_strings);
  r->stats.draft = req.draft;
  r->stats.draft_len = req.draft_len;
  r->stats.prompt_tokens = static_cast<int>(req.prompt.size());
  r->stats.prompt_attention = rt_.prompt_attention();
  r->stats.accepted_hist.assign(limits_.max_draft_len + 1, 0);
  for (std::vector<int>& h : r->stats.accepted_hist_by_source)
    h.assign(limits_.max_draft_len + 1, 0);
  // A prediction longer than the context can only be drafted from up to max_seq_len tokens.
  if (static_cast<int>(req.prediction.size()) > limits_.max_seq_len)
    req.prediction.resize(limits_.max_seq_len);
  r->req = std::move(req);
  r->t_submit = now_s();
  const uint64_t id = r->id;
  queue_.push_back(std::move(r));
  return id;
}

void Scheduler::cancel(uint64_t id) {
  cancels_.push_back(id);
}

const SeqState* Scheduler::seq_state(uint64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second->seq;
}

int Scheduler::slot_of(uint64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? -1 : it->second->slot;
}

SchedulerEvent& Scheduler::event_for(Request& r, std::vector<SchedulerEvent>& events) {
  for (SchedulerEvent& e : events)
    if (e.id == r.id) return e;
  events.push_back(SchedulerEvent{});
  events.back().id = r.id;
  return events.back();
}

void Scheduler::finish(Request& r, FinishReason why, SchedulerEvent& ev, double now) {
  r.reason = why;
  ev.finished = true;
  ev.reason = why;
  ev.text += r.stop.ready(true);
  r.stats.total_s = now - r.t_submit;
  if (r.slot >= 0)
    for (const std::unique_ptr<Proposer>& p : proposers_)
      r.stats.draft_model_skipped = r.stats.draft_model_skipped || p->declined(r.slot);
  ev.stats = r.stats;
  if (r.slot >= 0) {
    if (opts_.prompt_cache) {  // the prompt rows it left in the cache, for the slot's next request
      const int kept = std::min(r.prefilled, static_cast<int>(r.req.prompt.size()));
      held_[r.slot].assign(r.req.prompt.begin(), r.req.prompt.begin() + kept);
      released_[r.slot] = ++releases_;
    }
    for (const std::unique_ptr<Proposer>& p : proposers_) p->end(r.slot);
    slots_[r.slot] = nullptr;
  }
}

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

bool Scheduler::emit(Request& r, int32_t tok, SchedulerEvent& ev, double now,
                     const TokenLogprob* lp) {
  ev.tokens.push_back(tok);
  if (r.req.sampling.logprobs >= 0) {
    std::vector<TokenLogprob> e{lp ? lp[0] : TokenLogprob{tok, NAN}};
    for (int i = 1; lp && i <= r.req.sampling.logprobs && lp[i].id >= 0; ++i) e.push_back(lp[i]);
    ev.logprobs.push_back(std::move(e));
  }
  r.generated += 1;
  r.stats.token_times.push_back(now - r.t_submit);
  const auto& stops = r.req.stop_ids;
  if (!opts_.token_bytes.empty()) r.stop.feed(opts_.token_bytes[tok]);
  if (std::find(stops.begin(), stops.end(), tok) != stops.end())
    r.reason = FinishReason::kStopToken;
  else if (r.stop.hit())
    r.reason = FinishReason::kStopString;
  else if (r.generated >= r.req.max_new_tokens)
    r.reason = FinishReason::kMaxNewTokens;
  return r.reason == FinishReason::kNone;
}

std::vector<SchedulerEvent> Scheduler::step() {
  std::vector<SchedulerEvent> events;
  const double t = now_s();
  // 1. Cancellations.
  for (uint64_t id : cancels_) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if ((*it)->id == id) {
        finish(**it, FinishReason::kCancelled, event_for(**it, events), t);
        queue_.erase(it);
        break;
      }
    auto it = live_.find(id);
    if (it != live_.end()) {
      finish(*it->second, FinishReason::kCancelled, event_for(*it->second, events), t);
      live_.erase(it);
    }
  }
  cancels_.clear();
  // 2. Admissions.
  admit(events);
  // 3. Prefill.
  bool decoding = false;
  for (Request* r : slots_) decoding = decoding || (r && r->decoding);
  // When no other sequence decodes, a step that emitted first tokens returns them at once: the
  // caller's time to first token holds the target's prefill only (the draft reads the last
  // chunk, and the first iteration runs, at the next step). Sequences already decoding always
  // get their iteration.
  // 4. One iteration for every decoding sequence. On a host backend it carries the prefill
  // chunk: the chunk's rows and the verify rows share one pass over the weights.
  if (decoding && opts_.carry_prefill && iter_.can_carry()) {
    decode(events, true);
  } else {
    const int started = prefill(events, decoding);
    if (started == 0 || decoding) decode(events, false);
  }
  for (const SchedulerEvent& e : events)
    if (e.finished) live_.erase(e.id);
  return events;
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
  const int cap = static_cast<int>(prompt.size()) - 1;
  int best = -1;
  *len = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    const Request* r = slots_[s];
    if (!r || r->reason != FinishReason::kNone) continue;
    const std::vector<int32_t>& p = r->req.prompt;  // (its cache holds [0, prefilled) of it)
    const int n = std::min(cap, static_cast<int>(p.size()));
    int l = 0;
    while (l < n && p[l] == prompt[l]) ++l;
    if (l > *len) {
      best = s;
      *len = l;
    }
  }
  return best;
}

int Scheduler::pick_slot(const std::vector<int32_t>& prompt, int* cached) const {
  const int cap = static_cast<int>(prompt.size()) - 1;
  int best = -1, best_len = 0;
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
    if (slots_[s]) continue;
    const std::vector<int32_t>& h = held_[s];
    const int n = std::min(cap, static_cast<int>(h.size()));
    int len = 0;
    while (len < n && h[len] == prompt[len]) ++len;
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

void Scheduler::sync_sources(Request& r) {
  int32_t s = 0;
  for (const std::unique_ptr<Proposer>& p : proposers_)
    if ((r.allowed & p->source_bit()) && p->active(r.slot)) s |= p->source_bit();
  if (s == r.sources) return;
  r.sources = s;
  if (!r.decoding) return;
  r.seq.sources = s;
  iter_.set_sources(r.slot, s);
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
  bool any_pen = false;
  for (const Request* r : c.completing) any_pen = any_pen || r->penalties.active;
  if (any_pen || iter_.has_penalties())
    for (const Request* r : c.completing) iter_.set_penalties(r->slot, r->penalties, r->req.prompt);
  if (any_pen) iter_.penalize_rows(sample_slots_.as<int32_t>(), m, const_cast<float*>(logits));
  // Constraints: each constrained prompt's last row masked (the others' rows allow all).
  bool any_mask = false;
  for (const Request* r : c.completing) any_mask = any_mask || r->req.constraint;
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
  bool any_lp = false;
  for (const Request* r : c.completing) any_lp = any_lp || r->req.sampling.logprobs >= 0;
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

void Scheduler::before_iteration(const std::vector<Request*>& active) {
  for (Request* r : active) {
    for (const std::unique_ptr<Proposer>& p : proposers_) p->before_iteration(r->slot, r->tokens);
    sync_sources(*r);
  }
}

void Scheduler::take_prefill_time() {
  for (const std::unique_ptr<Proposer>& p : proposers_) p->synchronised();
  if (prefill_timed_rows_ == 0) return;
  pacer_.observe_prefill(prefill_timed_rows_, prefill_timer_->seconds());
  prefill_timed_rows_ = 0;
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

void Scheduler::decode(std::vector<SchedulerEvent>& events, bool carry) {
  std::vector<Request*> active;
  for (Request* r : slots_)
    if (r && r->decoding && r->reason == FinishReason::kNone) active.push_back(r);
  if (active.empty()) return;
  before_iteration(active);
  // Constrained sequences: the tokens their grammar forces next, offered as certain drafts.
  for (Request* r : active)
    if (r->req.constraint && r->sources) {
      const std::vector<int32_t> f = r->req.constraint->forced(limits_.max_draft_len);
      if (!f.empty())
        for (const std::unique_ptr<Proposer>& p : proposers_)
          if (r->sources & p->source_bit()) p->certain(r->slot, f, r->seq);
    }
  const int B = static_cast<int>(active.size());
  const Choice c = choose(active);
  // The proposer's work before its iteration (the draft model's catch-up), timed on the device.
  Proposer* prep = c.k > 0 ? iter_.proposer(c.source) : nullptr;
  if (prep)
    for (Request* r : active)
      if (r->sources & draft_source_bit(c.source)) prep->prepare(r->slot, r->tokens, r->seq);
  std::vector<int32_t> slots(B);
  for (int b = 0; b < B; ++b) slots[b] = active[b]->slot;
  if (slots != iter_slots_) {
    iter_.set_slots(slots.data(), B);
    iter_slots_ = slots;
  }
  // A prefill chunk carried by the verify pass (rows that cost about one iteration).
  Chunk chunk;
  if (carry) {
    chunk = plan_chunk(std::min(pacer_.interleave_rows(true), iter_.carry_room(c.k)));
    if (!chunk.pieces.empty()) {
      iter_.carry(chunk.rows);
      last_prefill_rows_ = chunk.rows.size();
    }
  }
  // Costs are device time (backend timers, Iteration::times), read after the read-back, the one
  // synchronisation of the iteration. A capture is host work before the timed iteration; the
  // first run of a (source, B, k) on an asynchronous backend is a warm-up that is not observed.
  bool any_lp = false;
  for (const Request* r : active) any_lp = any_lp || r->req.sampling.logprobs >= 0;
  iter_.set_logprobs(any_lp);
  bool any_pen = false;
  for (const Request* r : active) any_pen = any_pen || r->penalties.active;
  iter_.set_penalties_on(any_pen);
  // Constraints: after the proposal, each constrained sequence's verify rows get their masks
  // (the proposal read back: a synchronisation inside the iteration); the others' allow all.
  bool any_mask = false;
  for (const Request* r : active) any_mask = any_mask || r->req.constraint;
  iter_.set_masks_on(any_mask);
  std::function<void()> between;
  if (any_mask)
    between = [&] {
      iter_.read_states(seqs_);
      const int W = iter_.mask_words(), R = c.k + 1;
      std::vector<uint32_t> masks(static_cast<size_t>(B) * R * W, ~0u);
      for (int b = 0; b < B; ++b)
        if (const auto& con = active[b]->req.constraint)
          constraint_masks(*con, &seqs_[active[b]->slot].tree,
                           masks.data() + static_cast<size_t>(b) * R * W, W);
      iter_.upload_masks(masks);
    };
  iter_.capture(c.source, c.k);  // (a no-op without graphs)
  iter_.run(c.source, c.k, between);
  iter_.read_states(seqs_);
  if (any_lp) iter_.read_logprobs(lp_);
  const double now = now_s();
  last_times_ = iter_.times();
  take_prefill_time();  // (after the read-back: free)
  if (prep)
    for (Request* r : active) r->stats.catch_up_s += prep->take_prepare_seconds(r->slot);
  last_B_ = B;
  last_k_ = c.k;
  iterations_ += 1;
  last_source_ = c.source;
  if (!chunk.pieces.empty()) chunk_done(chunk, iter_.carried_row0(), true);
  const double own_s = attribute_costs(c, B, chunk.rows.size());
  for (Request* rp : active) {
    Request& r = *rp;
    r.seq = seqs_[r.slot];
    const SeqState& s = r.seq;
    RequestStats& st = r.stats;
    const int src = s.source;
    st.iterations += 1;
    st.iterations_by_source[src] += 1;
    st.sources.push_back(kSourceLetters[src]);
    st.draft_s += last_times_.draft_s;  // the whole batch's iteration: what this request waited
    st.verify_s += last_times_.verify_s;
    if (s.n_drafted > 0) {
      st.spec_iterations += 1;
      st.drafted += s.n_drafted;
      st.accepted += s.n_acc;
      st.drafted_by_source[src] += s.n_drafted;
      st.accepted_by_source[src] += s.n_acc;
      const int bin = std::min(s.n_acc, static_cast<int>(st.accepted_hist.size()) - 1);
      st.accepted_hist[bin] += 1;
      st.accepted_hist_by_source[src][bin] += 1;
      st.prediction_accepted += s.pred_acc;
      st.prediction_rejected += s.pred_rej;
    }
    for (const std::unique_ptr<Proposer>& p : proposers_)
      p->commit(r.slot, s, src == static_cast<int>(p->source()));
    if (r.req.constraint) r.req.constraint->commit(std::vector<int32_t>(s.out, s.out + s.n_new));
    SchedulerEvent& ev = event_for(r, events);
    bool open = true;
    const int b = static_cast<int>(std::find(slots.begin(), slots.end(), r.slot) - slots.begin());
    for (int i = 0; i < s.n_new; ++i) {
      r.tokens.push_back(s.out[i]);
      if (open) {
        st.emitted += 1;
        const size_t e = (static_cast<size_t>(b) * (c.k + 1) + i) * kLogprobEntries;
        open = emit(r, s.out[i], ev, now, any_lp ? lp_.data() + e : nullptr);
      }
    }
    if (open && s.n_past >= rt_.max_seq_len()) {
      r.reason = FinishReason::kMaxSeqLen;  // no position left to feed the newest token
      open = false;
    }
    if (!open) {
      finish(r, r.reason, ev, now);
      continue;
    }
    ev.text += r.stop.ready();
    const int left =
        std::min(r.req.max_new_tokens - r.generated, rt_.max_seq_len() - 1 - r.seq.n_past);
    const AfterIteration after{r.seq, r.tokens, B, own_s, left, iter_.warm_up()};
    for (const std::unique_ptr<Proposer>& p : proposers_) p->after_iteration(r.slot, after);
    sync_sources(r);
  }
  if (!chunk.completing.empty()) first_tokens(chunk, iter_.carried_logits(), events);
}

double Scheduler::attribute_costs(const Choice& c, int B, int carried_rows) {
  // The proposers learn the cost of what ran (a warm-up's times hold one-time work: not).
  // A carried chunk's rows are in the verify time: where the iteration's own cost is predicted,
  // the rest is the chunk's (the pacer learns it) and the controllers learn nothing; else they
  // learn the time less the rows at the pacer's separate-chunk rate (an estimate that later
  // iterations refine), or nothing before that rate is measured. The iteration's own cost is
  // B's measured one, else its cross-B prior (draft_controller.h): the controllers then learn B
  // from iterations that carry nothing, never from a time less an estimate of the rows.
  const double total = last_times_.total();
  double decode_s = total, verify_s = last_times_.verify_s;
  bool learn = !iter_.warm_up();
  if (carried_rows > 0) {
    const double own = predicted_time(c.source, B, c.k, /*prior=*/false);
    const double d = own > 0.0 ? own : predicted_time(c.source, B, c.k);
    if (learn && d > 0.0) {
      pacer_.observe_carried(carried_rows, total - d);
      pacer_.observe_decode(d);
      return d;
    }
    const double rows_s = carried_rows * pacer_.per_row();
    decode_s -= rows_s;
    verify_s -= rows_s;
    learn = learn && rows_s > 0.0 && verify_s > 0.0;
  }
  if (learn) pacer_.observe_decode(decode_s);
  if (learn) {
    IterationCost cost{c.source, B, c.k, decode_s, last_times_.draft_s, verify_s};
    cost.rows = iter_.last_rows();  // (fewer than B (k + 1) where padding was skipped)
    for (const std::unique_ptr<Proposer>& p : proposers_) p->observe_iteration(cost);
  }
  return decode_s;
}

}  // namespace trt_spec
