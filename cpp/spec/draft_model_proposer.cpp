// draft_model_proposer.cpp: the draft model's steps, catch-up and bookkeeping
// (draft_model_proposer.h).
#include "spec/draft_model_proposer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace trt_spec {

DraftModelProposer::DraftModelProposer(Backend& be, Model& draft, int max_batch, int max_k,
                                       int vocab_target, ProposerOptions opts)
    : be_(be),
      draft_(draft),
      ops_(make_draft_model_ops(be, max_batch, draft.config().vocab_size)),
      vocab_common_(std::min(vocab_target, draft.config().vocab_size)),
      opts_(opts),
      controller_(max_batch, max_k),
      slots_(max_batch) {
  const int R = draft.limits().max_rows;
  tok_ = BackendBuffer(be, R * 4);
  pos_ = BackendBuffer(be, R * 4);
  row_slot_ = BackendBuffer(be, R * 4);
  last_rows_ = BackendBuffer(be, max_batch * 4);
}

void DraftModelProposer::begin(int slot, const Admission& a) {
  SlotState& s = slots_[slot];
  const int rows = static_cast<int>(a.prompt.size()) - 1;  // (the first iteration feeds P - 1)
  const int window = opts_.draft_window;
  s.off = window > 0 ? std::max(0, rows - window) : 0;
  // The positions the target keeps, as far as the draft read them as prompt rows (the same
  // tokens: the target keeps only a common prefix); read_prompt() continues from there.
  int kept = s.off == 0 ? std::min(a.cached, s.prompt_kept) : 0;
  if (a.copy_from >= 0) {  // the target's rows came from another slot: so do the draft's
    const SlotState& src = slots_[a.copy_from];
    kept = s.off == 0 && src.off == 0 ? std::min(a.cached, src.prompt_read) : 0;
    be_.kv_copy_prefix(draft_.kv(), a.copy_from, slot, kept);
  }
  s.draft_valid = std::max(s.off, kept);
  s.prompt_read = kept;
  s.prompt_kept = 0;
  s.read_first = s.read_n = 0;
  s.deferred_s[0] = s.deferred_s[1] = 0.0;
  s.deferred_tokens[0] = s.deferred_tokens[1] = 0;
  s.est = controller_.prior();
  s.mode = a.allowed ? Mode::kActive : Mode::kOff;
  if (!a.allowed || !a.automatic) return;
  // A fully automatic request has the draft read its prompt only where drafting is expected to
  // save more than the read costs (DraftController::reads_prompt); otherwise it decodes with the
  // other sources and plain steps. Where the read pays against plain steps and the request may
  // use another source, it may wait (DraftController::defers): prompt lookup may beat the draft
  // on this request (an edit that copies its input), which only the request's own iterations
  // tell (after_iteration).
  using Read = DraftController::PromptRead;
  const int read_rows = prompt_rows_for(static_cast<int>(a.prompt.size()));
  const Read read = controller_.reads_prompt(a.batch, read_rows, a.new_tokens);
  if (read == Read::kPays && a.others && controller_.defers(a.batch, read_rows, kDeferTokens))
    s.mode = Mode::kDeferred;
  else if (read == Read::kSkip)
    s.mode = Mode::kDeclined;
}

bool DraftModelProposer::declined(int slot) const {
  const Mode m = slots_[slot].mode;
  return m == Mode::kDeclined || m == Mode::kDeferred;
}

void DraftModelProposer::prompt_done(int slot, const std::vector<int32_t>& prompt, int first, int n,
                                     int row, bool others_decoding) {
  // The draft reads the same rows, those of its prompt window (positions up to P - 2: the first
  // iteration feeds P - 1 itself; read_prompt skips the rest), and a prompt's last chunk after
  // its first token (before_iteration). With a window and nothing else decoding, the whole
  // window waits for the first token too (nobody but this request waits for its read); while
  // others decode, its rows are read as the chunks pass, so that no step of theirs reads it
  // all. With draft_read_chunk, every row waits for the first token, and the request decodes
  // without the draft until it has read them.
  SlotState& s = slots_[slot];
  if (s.mode != Mode::kActive) return;
  const bool wait = opts_.draft_read_chunk > 0 || (!others_decoding && opts_.draft_window > 0);
  const int P = static_cast<int>(prompt.size());
  const int upto = std::min(first + n, P - 1);
  const int next = s.draft_valid;
  if (first + n == P) {
    s.read_first = next;
    s.read_n = std::max(0, upto - next);
    if (opts_.draft_read_chunk > 0 && s.read_n > 0) s.mode = Mode::kReading;
  } else if (!wait && upto > next) {
    read_prompt(slot, prompt.data() + next, next, upto - next);
  }
}

void DraftModelProposer::before_iteration(int slot, const std::vector<int32_t>& tokens) {
  // The rows left from the prefill: all of them, or with draft_read_chunk at most that many per
  // step; once they are read the draft is back (its lag, the tokens generated meanwhile, is read
  // by the catch-up before its first drafting iteration).
  SlotState& s = slots_[slot];
  if (s.read_n == 0) return;
  const int n = opts_.draft_read_chunk > 0 ? std::min(s.read_n, opts_.draft_read_chunk) : s.read_n;
  read_prompt(slot, tokens.data() + s.read_first, s.read_first, n);
  s.read_first += n;
  s.read_n -= n;
  if (s.read_n == 0 && s.mode == Mode::kReading) s.mode = Mode::kActive;
}

void DraftModelProposer::after_iteration(int slot, const AfterIteration& a) {
  // A request waiting to join, after an iteration that cost it a.seconds: once past its first
  // kDeferTokens tokens, the draft reads its rows so far and joins where that is worth it.
  // (A warm-up's time holds one-time work: not this request's cost of going without the draft.)
  SlotState& s = slots_[slot];
  if (s.mode != Mode::kDeferred || a.warm_up) return;
  const int i = a.seq.source == static_cast<int32_t>(DraftSource::kNone) ? 0 : 1;
  s.deferred_s[i] += a.seconds;
  s.deferred_tokens[i] += a.seq.n_new;
  if (s.deferred_tokens[0] + s.deferred_tokens[1] < kDeferTokens) return;
  const double per_token = controller_.join_saving(a.B, s.deferred_s[0], s.deferred_tokens[0],
                                                   s.deferred_s[1], s.deferred_tokens[1]);
  // Positions [0, n_past - 1) (those of its prompt window): then the first draft step reads
  // [prev, last] as usual.
  const int upto = a.seq.n_past - 1;
  if (a.tokens_left <= 0 || upto > static_cast<int>(a.tokens.size()) ||
      !controller_.catch_up_pays(a.B, rows_up_to(slot, upto), a.tokens_left * per_token))
    return;
  controller_.observe_deferral(true);
  read_prompt(slot, a.tokens.data(), 0, upto);
  s.mode = Mode::kActive;
}

void DraftModelProposer::end(int slot) {
  SlotState& s = slots_[slot];
  // A request that waited for the draft and ended without it, once past its first tokens.
  if (s.mode == Mode::kDeferred && s.deferred_tokens[0] + s.deferred_tokens[1] >= kDeferTokens)
    controller_.observe_deferral(false);
  s.prompt_kept = s.off == 0 ? s.prompt_read : 0;
  s.mode = Mode::kOff;
  s.read_n = 0;
}

int DraftModelProposer::prompt_rows_for(int prompt_len) const {
  const int rows = std::max(0, prompt_len - 1);
  return opts_.draft_window > 0 ? std::min(rows, opts_.draft_window) : rows;
}

void DraftModelProposer::forward_rows(const int32_t* tokens, const int32_t* pos,
                                      const int32_t* slots, int n, bool prompt) {
  const int R = draft_.limits().max_rows;
  for (int s = 0; s < n; s += R) {
    const int c = std::min(R, n - s);
    be_.upload(tok_.as<void>(), tokens + s, c * 4);
    be_.upload(pos_.as<void>(), pos + s, c * 4);
    be_.upload(row_slot_.as<void>(), slots + s, c * 4);
    Rows rows{tok_.as<int32_t>(), pos_.as<int32_t>(), row_slot_.as<int32_t>()};
    if (prompt) rows.prompt_from = 0;
    draft_.forward(rows, c, nullptr, 0, nullptr);
  }
}

void DraftModelProposer::read_prompt(int slot, const int32_t* tokens, int first_pos, int n) {
  SlotState& s = slots_[slot];
  if (n <= 0) return;
  const int end = first_pos + n, from = std::max(first_pos, s.off);  // (rows in the window)
  if (end > from) {
    std::vector<int32_t> pos(end - from), slots(end - from, slot);
    std::iota(pos.begin(), pos.end(), from - s.off);  // draft positions
    reads_.push_back(
        timed_forward(tokens + (from - first_pos), pos.data(), slots.data(), end - from, true));
    prompt_rows_read_ += end - from;
  }
  s.draft_valid = std::max(end, s.off);  // (the scheduler feeds the chunks in order)
  if (s.off == 0 && first_pos == s.prompt_read) s.prompt_read = end;
}

void DraftModelProposer::synchronised() {
  for (TimedRows& r : reads_) {
    controller_.observe_read(r.rows, r.timer->seconds());
    spare_timers_.push_back(std::move(r.timer));
  }
  reads_.clear();
}

int DraftModelProposer::lag(int slot, int n_past) const {
  return std::max(0, n_past - 1 - slots_[slot].draft_valid);
}

void DraftModelProposer::prepare(const std::vector<PrepareSeq>& seqs) {
  drop_catch_up();
  // The rows each sequence lags, all in one forward (device time: the rows are only queued here
  // on an asynchronous backend).
  std::vector<int32_t> tok, pos, slots;  // [rows of every sequence]
  for (const PrepareSeq& p : seqs) {
    SlotState& s = slots_[p.slot];
    const int n = lag(p.slot, p.seq->n_past);
    if (n == 0) continue;
    const auto first = p.tokens->begin() + s.draft_valid;
    tok.insert(tok.end(), first, first + n);
    for (int i = 0; i < n; ++i) pos.push_back(s.draft_valid + i - s.off);  // draft positions
    slots.insert(slots.end(), n, p.slot);
    catch_up_.share.emplace_back(p.slot, n);
    s.draft_valid += n;
  }
  if (tok.empty()) return;
  const int n = static_cast<int>(tok.size());
  catch_up_.forward = timed_forward(tok.data(), pos.data(), slots.data(), n, false);
}

double DraftModelProposer::take_prepare_seconds(int slot) {
  auto it = std::find_if(catch_up_.share.begin(), catch_up_.share.end(),
                         [&](const std::pair<int, int>& s) { return s.first == slot; });
  if (it == catch_up_.share.end()) return 0.0;
  TimedRows& f = catch_up_.forward;
  if (catch_up_.seconds < 0.0) {
    catch_up_.seconds = f.timer->seconds();
    controller_.observe_catch_up(f.rows, catch_up_.seconds);
  }
  const double dt = catch_up_.seconds * it->second / f.rows;
  catch_up_.share.erase(it);
  if (catch_up_.share.empty()) drop_catch_up();
  return dt;
}

DraftModelProposer::TimedRows DraftModelProposer::timed_forward(const int32_t* tokens,
                                                                const int32_t* pos,
                                                                const int32_t* slots, int n,
                                                                bool prompt) {
  TimedRows w{n, take_timer()};
  w.timer->start();
  forward_rows(tokens, pos, slots, n, prompt);
  w.timer->stop();
  return w;
}

std::unique_ptr<Backend::Timer> DraftModelProposer::take_timer() {
  if (spare_timers_.empty()) return be_.timer();
  std::unique_ptr<Backend::Timer> t = std::move(spare_timers_.back());
  spare_timers_.pop_back();
  return t;
}

void DraftModelProposer::drop_catch_up() {
  if (catch_up_.forward.timer) spare_timers_.push_back(std::move(catch_up_.forward.timer));
  catch_up_ = CatchUp{};
}

void DraftModelProposer::issue_propose(IterationContext& ctx, int k) {
  const int B = ctx.B;
  if (ctx.forced_draft && B * (k + 1) <= draft_.limits().max_rows)
    return propose_skipping_forced(ctx, k);
  for (int j = 0; j < k; ++j) {
    float* qj = ctx.q + static_cast<size_t>(j) * B * ctx.vocab_draft;  // [B, vocab_draft]
    if (j == 0) ops_->draft_rows(ctx.st, ctx.slots, B, j, ctx.rows);   // (later steps: below)
    if (j == 0)  // [B, 2] rows: prev, last; the logits of `last` (rows 1, 3, 5, ..)
      draft_.forward(ctx.rows.rows(false), 2 * B, ctx.odd, B, qj);
    else  // [B, 1] rows: node j - 1
      draft_.forward(ctx.rows.rows(false), B, ctx.identity, B, qj);
    if (ctx.penalize_draft) ctx.penalize_draft(qj, j, ctx.vocab_draft, vocab_common_);
    if (ctx.mask_draft) ctx.mask_draft(qj, j, ctx.vocab_draft, vocab_common_, nullptr);
    // ... and the rows of step j + 1 (node j), written as node j is drawn.
    ops_->draft_sample(ctx.st, ctx.slots, B, j, qj, ctx.vocab_draft, vocab_common_,
                       j + 1 < k ? &ctx.rows : nullptr);
  }
}

void DraftModelProposer::propose_skipping_forced(IterationContext& ctx, int k) {
  // (host memory: the backend runs on the host)
  const int B = ctx.B;
  const RowBuffers& r = ctx.rows;
  std::vector<std::vector<int32_t>> tok(B), pos(B);  // each sequence's rows not fed yet
  std::vector<int32_t> forced(B), last(B);
  int fed = 0;  // nodes [0, fed) fed to the draft (a step is skipped for the whole batch or none)
  for (int j = 0; j < k; ++j) {
    float* qj = ctx.q + static_cast<size_t>(j) * B * ctx.vocab_draft;  // [B, vocab_draft]
    ops_->draft_rows(ctx.st, ctx.slots, B, j, r);  // prev, last (j = 0), or node j - 1
    const int per = j == 0 ? 2 : 1;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < per; ++i) {
        tok[b].push_back(r.tokens[per * b + i]);
        pos[b].push_back(r.pos[per * b + i]);
      }
    if (ctx.forced_draft(j, vocab_common_, forced.data())) {
      // Node j is the grammar's one token: q one-hot at it (certain to be accepted).
      for (int b = 0; b < B; ++b) {
        float* row = qj + static_cast<size_t>(b) * ctx.vocab_draft;
        std::fill(row, row + ctx.vocab_draft, -INFINITY);
        row[forced[b]] = 0.0f;
      }
      ops_->draft_sample(ctx.st, ctx.slots, B, j, qj, ctx.vocab_draft, vocab_common_, nullptr);
      continue;
    }
    int n = 0;  // [sum of the rows not fed] rows; the logits of each sequence's last
    for (int b = 0; b < B; ++b) {
      for (size_t i = 0; i < tok[b].size(); ++i, ++n) {
        r.tokens[n] = tok[b][i];
        r.pos[n] = pos[b][i];
        r.slot[n] = ctx.slots[b];
      }
      last[b] = n - 1;
      tok[b].clear();
      pos[b].clear();
    }
    fed = j;
    be_.upload(last_rows_.as<void>(), last.data(), B * 4);
    draft_.forward(r.rows(false), n, last_rows_.as<int32_t>(), B, qj);
    if (ctx.penalize_draft) ctx.penalize_draft(qj, j, ctx.vocab_draft, vocab_common_);
    ctx.mask_draft(qj, j, ctx.vocab_draft, vocab_common_, nullptr);
    ops_->draft_sample(ctx.st, ctx.slots, B, j, qj, ctx.vocab_draft, vocab_common_, nullptr);
  }
  for (int b = 0; b < B; ++b) slots_[ctx.slots[b]].fed = fed;
}

void DraftModelProposer::commit(int slot, const SeqState& seq, bool used) {
  SlotState& s = slots_[slot];
  const int fed = std::exchange(s.fed, -1);
  if (used && seq.n_drafted > 0) {
    s.est.observe(seq.n_acc, seq.depth);
    controller_.observe_acceptance(seq.n_acc, seq.depth);
    s.draft_valid = valid_after(seq);
    // Positions up to the last node fed: n_past before the iteration (its `last`) + 1 + fed.
    if (fed >= 0) s.draft_valid = std::min(s.draft_valid, seq.n_past - seq.n_new + 1 + fed);
  } else {
    s.est.relax(controller_.long_run_alpha());  // nothing observed: back toward the mean
  }
}

bool DraftModelProposer::alphas(const OfferQuery& q, std::vector<double>& a, int* lags) const {
  a.assign(q.B(), 0.0);
  *lags = 0;
  bool any = false;
  for (int b = 0; b < q.B(); ++b) {
    const OfferSeq& s = q.seqs[b];
    if (!s.uses(*this)) continue;
    any = true;
    a[b] = alpha(s.slot);
    *lags += lag(s.slot, s.seq->n_past);
  }
  return any;
}

Offer DraftModelProposer::offer(const OfferQuery& q) {
  std::vector<double> a;
  int lag_total = 0;
  if (!alphas(q, a, &lag_total)) return {};
  const int B = q.B();
  // The controller weighs every k against a plain step (k = 0) itself.
  const int k = controller_.choose(B, a, q.limit, lag_total);
  if (k == 0) return {};
  double tokens = 0.0;
  for (double x : a) tokens += expected_tokens(x, k);
  return Offer{k, tokens, controller_.predicted_time(B, k), false, true};
}

Offer DraftModelProposer::offer_fixed(const OfferQuery& q, int k) {
  std::vector<double> a;
  int lag_total = 0;
  if (!alphas(q, a, &lag_total)) return {};
  double tokens = 0.0;
  for (double x : a) tokens += expected_tokens(x, k);
  return Offer{k, tokens, controller_.predicted_time(q.B(), k), false, true};
}

double DraftModelProposer::charge(const OfferQuery& q, double tokens) const {
  // Tokens emitted without the draft cost it a catch-up later, while drafting pays: one draft
  // forward over the share of each sequence that may use it, cheaper per token the more tokens
  // it reads at once.
  const int B = q.B();
  int users = 0;
  for (const OfferSeq& s : q.seqs) users += s.uses(*this) ? 1 : 0;
  if (users == 0 || !controller_.drafting_pays(B)) return 0.0;
  const int each = std::max(1, static_cast<int>(std::ceil(tokens / B)));
  return controller_.catch_up_time(users * each);
}

void DraftModelProposer::observe_iteration(const IterationCost& c) {
  // Its own iterations and plain steps price its model; another source's iteration is a verify
  // pass of k + 1 rows per sequence like its own.
  if (c.source == source() || c.k == 0)
    controller_.observe(c.B, c.k, c.total_s, c.draft_s, c.verify_s, c.rows);
  else
    controller_.observe_verify(c.B, c.k + 1, c.verify_s, c.rows);
}

std::unique_ptr<Proposer> make_draft_model_proposer(const ProposerEnv& env) {
  if (!env.draft || env.max_k == 0) return nullptr;
  return std::make_unique<DraftModelProposer>(env.be, *env.draft, env.max_batch, env.max_k,
                                              env.target.config().vocab_size, env.opts);
}

}  // namespace trt_spec
