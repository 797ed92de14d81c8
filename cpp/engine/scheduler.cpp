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
#include "spec/mask_rows.h"

namespace trt_spec {

namespace {

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
  proposers_ = attach_proposers(
      iter_, rt.backend(), rt.file(), rt.target(), rt.draft(), B, K,
      ProposerOptions{opts_.draft_window, opts_.draft_read_chunk, opts_.eagle_topk});
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

bool Scheduler::emit(Request& r, int32_t tok, SchedulerEvent& ev, double now,
                     const TokenLogprob* lp) {
  ev.tokens.push_back(tok);
  if (r.wants_logprobs()) {
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

void Scheduler::decode(std::vector<SchedulerEvent>& events, bool carry) {
  std::vector<Request*> active;
  for (Request* r : slots_)
    if (r && r->decoding && r->reason == FinishReason::kNone) active.push_back(r);
  if (active.empty()) return;
  before_iteration(active);
  // Constrained sequences: the tokens their grammar forces next, offered as certain drafts.
  for (Request* r : active)
    if (r->constrained() && r->sources) {
      const std::vector<int32_t> f = r->req.constraint->forced(limits_.max_draft_len);
      if (!f.empty())
        for (const std::unique_ptr<Proposer>& p : proposers_)
          if (r->sources & p->source_bit()) p->certain(r->slot, f, r->seq);
    }
  const int B = static_cast<int>(active.size());
  const Choice c = choose(active);
  // The proposer's work before its iteration (the draft model's catch-up), timed on the device.
  Proposer* prep = c.k > 0 ? iter_.proposer(c.source) : nullptr;
  if (prep) {
    std::vector<PrepareSeq> ps;
    for (Request* r : active)
      if (r->sources & draft_source_bit(c.source)) ps.push_back({r->slot, &r->tokens, &r->seq});
    prep->prepare(ps);
  }
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
  const bool any_lp = std::any_of(active.begin(), active.end(),
                                  [](const Request* r) { return r->wants_logprobs(); });
  iter_.set_logprobs(any_lp);
  const bool any_pen =
      std::any_of(active.begin(), active.end(), [](const Request* r) { return r->penalized(); });
  iter_.set_penalties_on(any_pen);
  // Constraints: after the proposal, each constrained sequence's verify rows get their masks
  // (the proposal read back: a synchronisation inside the iteration); the others' allow all.
  // Where the verify pass skips padding rows (its rows cost compute), the nodes the masks
  // forbid leave the tree first (prune_forbidden): they could never be accepted.
  const bool any_mask =
      std::any_of(active.begin(), active.end(), [](const Request* r) { return r->constrained(); });
  iter_.set_masks_on(any_mask);
  std::function<void()> between;
  if (any_mask)
    between = [&] {
      iter_.read_states(seqs_);
      const int W = iter_.mask_words(), R = c.k + 1;
      std::vector<uint32_t> masks(static_cast<size_t>(B) * R * W, ~0u);
      std::vector<int> pruned;
      for (int b = 0; b < B; ++b)
        if (const auto& con = active[b]->req.constraint) {
          DraftTree& tree = seqs_[active[b]->slot].tree;
          uint32_t* rows = masks.data() + static_cast<size_t>(b) * R * W;
          constraint_masks(*con, &tree, rows, W);
          const int removed = iter_.skips_padding() ? prune_forbidden(tree, rows, W) : 0;
          if (removed > 0) pruned.push_back(active[b]->slot);
          active[b]->stats.pruned += removed;
        }
      if (!pruned.empty()) iter_.replace_trees(seqs_, pruned);
      iter_.upload_masks(masks);
    };
  // ... and on the host their draft chains are drawn inside the grammar, step by step.
  if (any_mask)
    iter_.set_draft_masker([&](int b, const std::vector<int32_t>& chain, uint32_t* row) {
      const auto& con = active[b]->req.constraint;
      if (!con) return false;
      chain_mask(*con, chain, row, iter_.mask_words());
      return true;
    });
  iter_.capture(c.source, c.k);  // (a no-op without graphs)
  iter_.run(c.source, c.k, between);
  iter_.set_draft_masker(nullptr);
  if (any_mask)
    for (int b = 0; b < B; ++b) active[b]->stats.forced += iter_.forced_steps(b);
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
