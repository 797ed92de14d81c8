// iteration.cpp: the ops of one speculative iteration (iteration.h).
#include "spec/iteration.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <utility>

#include "common/errors.h"

namespace trt_spec {

Iteration::Iteration(Backend& be, Model& target, Model* draft, int max_batch, int max_k,
                     int max_seq)
    : be_(be),
      target_(target),
      draft_(draft),
      max_batch_(max_batch),
      max_k_(max_k),
      max_seq_(max_seq) {
  if (max_k < 0 || max_k > kMaxDraftNodes)
    throw InvalidArgument("speculative iteration: bad draft length");
  vocab_t_ = target.config().vocab_size;
  vocab_d_ = draft ? draft->config().vocab_size : 0;
  const size_t rows = static_cast<size_t>(max_batch) * (max_k + 1);
  if (static_cast<int>(rows) > target.limits().max_rows ||
      (draft && 2 * max_batch > draft->limits().max_rows))
    throw InvalidArgument("speculative iteration: the models' row budget is too small");
  // The draft's rows may be wider than the target's (a padded embedding): scratch for both.
  ops_ = make_spec_ops(be, max_batch, max_k, std::max(vocab_t_, vocab_d_));
  seqs_ = BackendBuffer(be, sizeof(SeqState) * max_batch);
  states_ = BackendBuffer(be, sizeof(SamplingState) * max_batch);
  history_ = BackendBuffer(be, sizeof(int32_t) * max_batch * static_cast<size_t>(max_seq));
  prediction_ = BackendBuffer(be, sizeof(int32_t) * max_batch * static_cast<size_t>(max_seq));
  slots_ = BackendBuffer(be, sizeof(int32_t) * max_batch);
  start_slot_ = BackendBuffer(be, sizeof(int32_t));
  st_ = SpecState{seqs_.as<SeqState>(), states_.as<SamplingState>(), history_.as<int32_t>(),
                  prediction_.as<int32_t>(), max_seq};
  // Row metadata for the verify rows and rows carried beside them (the target's row budget).
  const size_t meta = std::max<size_t>(
      {rows, 2 * static_cast<size_t>(max_batch), static_cast<size_t>(target.limits().max_rows)});
  tok_ = BackendBuffer(be, meta * 4);
  pos_ = BackendBuffer(be, meta * 4);
  row_slots_ = BackendBuffer(be, meta * 4);
  kv_idx_ = BackendBuffer(be, meta * 4);
  tree_base_ = BackendBuffer(be, meta * 4);
  tree_bits_ = BackendBuffer(be, meta * 8);
  std::vector<int32_t> id(meta), odd(max_batch);
  std::iota(id.begin(), id.end(), 0);
  for (int b = 0; b < max_batch; ++b) odd[b] = 2 * b + 1;
  identity_ = BackendBuffer(be, meta * 4);
  odd_ = BackendBuffer(be, max_batch * 4);
  be.upload(identity_.as<void>(), id.data(), meta * 4);
  be.upload(odd_.as<void>(), odd.data(), max_batch * 4);
  if (draft && max_k > 0)
    q_ = BackendBuffer(be, static_cast<size_t>(max_k) * max_batch * vocab_d_ * 4);
  logits_ = BackendBuffer(be, (rows + max_batch) * vocab_t_ * 4);  // (carried: one per slot)
  carry_logit_rows_ = BackendBuffer(be, meta * 4);
  const size_t moves = static_cast<size_t>(max_batch) * kMaxDraftNodes;
  mv_slot_ = BackendBuffer(be, moves * 4);
  mv_src_ = BackendBuffer(be, moves * 4);
  mv_dst_ = BackendBuffer(be, moves * 4);
  draft_timer_ = be.timer();
  verify_timer_ = be.timer();
}

void Iteration::set_proposer(DraftSource s, Proposer* p) {
  proposers_[static_cast<int>(s)] = p;
  if (p && p->reads_hidden() && !hidden_.as<void>()) {
    const size_t rows = std::max<size_t>(static_cast<size_t>(max_batch_) * (max_k_ + 1),
                                         static_cast<size_t>(target_.limits().max_rows));
    hidden_ = BackendBuffer(be_, rows * target_.config().dim * sizeof(float));
  }
}

IterationContext Iteration::context() {
  RowBuffers rows{tok_.as<int32_t>(),    pos_.as<int32_t>(),       row_slots_.as<int32_t>(),
                  kv_idx_.as<int32_t>(), tree_base_.as<int32_t>(), tree_bits_.as<uint64_t>()};
  IterationContext ctx{be_,
                       st_,
                       slots_.as<int32_t>(),
                       B_,
                       rows,
                       identity_.as<int32_t>(),
                       odd_.as<int32_t>(),
                       q_.as<float>(),
                       vocab_d_};
  if (penalties_ && pen_.params) {
    const int32_t* slots = ctx.slots;
    ctx.penalize_draft = [this, slots](float* logits, int j, int stride, int vocab) {
      ops_->penalize_draft(st_, pen_, slots, B_, j, logits, stride, vocab);
    };
  }
  if (masks_ && draft_masker_ && be_.runs_on_host()) {
    const int32_t* slots = ctx.slots;
    step_masks_.j = -1;  // (this proposal's steps)
    ctx.mask_draft = [this, slots](float* logits, int j, int stride, int n, const int32_t* ids) {
      mask_draft_step(slots, j, logits, stride, n, ids);
    };
    ctx.forced_draft = [this, slots](int j, int vocab, int32_t* tokens) {
      return forced_draft_step(slots, j, vocab, tokens);
    };
  }
  return ctx;
}

const Iteration::StepMasks& Iteration::draft_step_masks(const int32_t* slots, int j) {
  // (host memory: the backend runs on the host, and has drawn the chain's nodes [0, j))
  StepMasks& m = step_masks_;
  if (m.j == j) return m;
  const int W = mask_words();
  m.rows.assign(static_cast<size_t>(B_) * W, ~0u);
  m.on.assign(B_, 0);
  std::vector<int32_t> chain;
  for (int b = 0; b < B_; ++b) {
    const DraftTree& t = st_.seqs[slots[b]].tree;
    chain.assign(t.token, t.token + j);
    m.on[b] = draft_masker_(b, chain, m.rows.data() + static_cast<size_t>(b) * W);
  }
  m.j = j;
  return m;
}

void Iteration::mask_draft_step(const int32_t* slots, int j, float* logits, int stride, int n,
                                const int32_t* ids) {
  const StepMasks& m = draft_step_masks(slots, j);
  const int W = mask_words(), V = vocab_t_;
  for (int b = 0; b < B_; ++b) {
    if (!m.on[b]) continue;
    const uint32_t* row = m.rows.data() + static_cast<size_t>(b) * W;
    auto allowed = [row, ids, V](int c) {
      const int v = ids ? ids[c] : c;
      return v >= 0 && v < V && ((row[v >> 5] >> (v & 31)) & 1u);
    };
    float* l = logits + static_cast<size_t>(b) * stride;  // [n] of [B, stride]
    bool any = false;
    for (int c = 0; c < n && !any; ++c) any = allowed(c) && l[c] > -INFINITY;
    if (!any) continue;  // (nothing it can draw inside the grammar: its own choice, pruned later)
    for (int c = 0; c < n; ++c)
      if (!allowed(c)) l[c] = -INFINITY;
  }
}

bool Iteration::forced_draft_step(const int32_t* slots, int j, int vocab, int32_t* tokens) {
  const StepMasks& m = draft_step_masks(slots, j);
  const int W = mask_words();
  for (int b = 0; b < B_; ++b) {
    if (!m.on[b]) return false;
    const uint32_t* row = m.rows.data() + static_cast<size_t>(b) * W;
    int only = -1;
    for (int w = 0; w < W; ++w) {
      if (row[w] == 0) continue;
      if (only >= 0 || (row[w] & (row[w] - 1)) != 0) return false;  // (two or more)
      only = w * 32 + __builtin_ctz(row[w]);
    }
    if (only < 0 || only >= vocab) return false;
    tokens[b] = only;
  }
  for (int b = 0; b < B_; ++b) ++forced_[b];
  return true;
}

void Iteration::start(int slot, const SeqState& seq, const SamplingState& sampling,
                      const std::vector<int32_t>& history, const std::vector<int32_t>& prediction) {
  if (slot < 0 || slot >= max_batch_) throw InvalidArgument("iteration: bad slot");
  if (static_cast<int>(history.size()) > max_seq_ || static_cast<int>(prediction.size()) > max_seq_)
    throw InvalidArgument("iteration: history or prediction longer than max_seq_len");
  be_.upload(st_.seqs + slot, &seq, sizeof(SeqState));
  be_.upload(st_.states + slot, &sampling, sizeof(SamplingState));
  if (pen_.params && pen_active_[slot] && seq.last >= 0 && seq.last < vocab_t_) {
    const int32_t one = 1;  // the first token, generated (the counts are zero: set_penalties)
    be_.upload(pen_.counts + static_cast<size_t>(slot) * vocab_t_ + seq.last, &one, 4);
  }
  const size_t row = static_cast<size_t>(slot) * max_seq_;
  if (!history.empty()) be_.upload(st_.history + row, history.data(), history.size() * 4);
  if (!prediction.empty())
    be_.upload(prediction_.as<int32_t>() + row, prediction.data(), prediction.size() * 4);
  const int32_t s32 = slot;
  be_.upload(start_slot_.as<void>(), &s32, 4);
  IterationContext ctx = context();
  ctx.slots = start_slot_.as<int32_t>();
  ctx.B = 1;
  Proposer* done[kDraftSourceCount] = {};
  for (int i = 0; i < kDraftSourceCount; ++i) {
    Proposer* p = proposers_[i];
    if (p && std::find(done, done + i, p) == done + i) p->issue_after_accept(ctx);
    done[i] = p;
  }
}

void Iteration::set_sources(int slot, int32_t sources) {
  if (slot < 0 || slot >= max_batch_) throw InvalidArgument("iteration: bad slot");
  be_.upload(reinterpret_cast<char*>(st_.seqs + slot) + offsetof(SeqState, sources), &sources, 4);
}

void Iteration::set_slots(const int32_t* host_slots, int B) {
  if (B < 1 || B > max_batch_) throw InvalidArgument("speculative iteration: bad batch size");
  be_.upload(slots_.as<void>(), host_slots, B * 4);
  B_ = B;
}

bool Iteration::has_graph(DraftSource source, int k) const {
  return graphs_.count({static_cast<int>(source), B_, k, flags()}) > 0;
}

void Iteration::set_logprobs(bool on) {
  if (on && !lp_out_.as<void>()) {
    const size_t n = static_cast<size_t>(max_batch_) * (max_k_ + 1);
    lp_rows_ = BackendBuffer(be_, n * 4);
    lp_tok_ = BackendBuffer(be_, n * 4);
    lp_slot_ = BackendBuffer(be_, n * 4);
    lp_out_ = BackendBuffer(be_, n * kLogprobEntries * sizeof(TokenLogprob));
  }
  logprobs_ = on;
}

void Iteration::set_penalties(int slot, const PenaltyParams& p,
                              const std::vector<int32_t>& prompt) {
  if (slot < 0 || slot >= max_batch_) throw InvalidArgument("iteration: bad slot");
  const int words = (vocab_t_ + 31) / 32;
  if (!pen_.params) {
    pen_params_ = BackendBuffer(be_, sizeof(PenaltyParams) * max_batch_);
    pen_counts_ = BackendBuffer(be_, sizeof(int32_t) * max_batch_ * static_cast<size_t>(vocab_t_));
    pen_prompt_ = BackendBuffer(be_, sizeof(uint32_t) * max_batch_ * static_cast<size_t>(words));
    const std::vector<PenaltyParams> none(max_batch_);
    be_.upload(pen_params_.as<void>(), none.data(), sizeof(PenaltyParams) * max_batch_);
    pen_ = PenaltyState{pen_params_.as<PenaltyParams>(), pen_counts_.as<int32_t>(),
                        pen_prompt_.as<uint32_t>(), vocab_t_, words};
    pen_active_.assign(max_batch_, 0);
  }
  be_.upload(pen_.params + slot, &p, sizeof(PenaltyParams));
  pen_active_[slot] = p.active ? 1 : 0;
  if (!p.active) return;
  const std::vector<int32_t> zeros(vocab_t_, 0);
  be_.upload(pen_.counts + static_cast<size_t>(slot) * vocab_t_, zeros.data(), vocab_t_ * 4);
  std::vector<uint32_t> bits(words, 0);
  for (int32_t t : prompt)
    if (t >= 0 && t < vocab_t_) bits[t >> 5] |= 1u << (t & 31);
  be_.upload(pen_.prompt + static_cast<size_t>(slot) * words, bits.data(), words * 4);
}

void Iteration::set_masks_on(bool on) {
  if (on) mask_buffer();
  masks_ = on;
}

uint32_t* Iteration::mask_buffer() {
  if (!mask_.as<void>())
    mask_ = BackendBuffer(
        be_, sizeof(uint32_t) * max_batch_ * static_cast<size_t>(max_k_ + 1) * mask_words());
  return mask_.as<uint32_t>();
}

void Iteration::upload_masks(const std::vector<uint32_t>& masks) {
  const size_t n = static_cast<size_t>(B_) * (max_k_ + 1) * mask_words();
  if (!mask_.as<void>() || masks.size() > n)
    throw InvalidArgument("iteration: masks beyond the verify rows (or masks are off)");
  be_.upload(mask_.as<void>(), masks.data(), masks.size() * sizeof(uint32_t));
}

void Iteration::mask_rows(float* logits, int n, const std::vector<uint32_t>& masks) {
  if (n <= 0) return;
  if (n > max_batch_ * (max_k_ + 1) || masks.size() < static_cast<size_t>(n) * mask_words())
    throw InvalidArgument("iteration: bad mask rows");
  uint32_t* buf = mask_buffer();
  be_.upload(buf, masks.data(), static_cast<size_t>(n) * mask_words() * 4);
  ops_->mask_rows(logits, n, vocab_t_, buf, mask_words());
}

void Iteration::penalize_rows(const int32_t* row_slots, int n, float* logits) {
  if (pen_.params) ops_->penalize_rows(pen_, row_slots, n, logits, vocab_t_);
}

void Iteration::read_logprobs(std::vector<TokenLogprob>& out) {
  if (!logprobs_) throw InvalidArgument("iteration: log-probabilities are off");
  const size_t n = static_cast<size_t>(B_) * (last_k_ + 1) * kLogprobEntries;
  out.resize(n);
  be_.download(out.data(), lp_out_.as<void>(), n * sizeof(TokenLogprob));
}

void Iteration::capture(DraftSource source, int k) {
  if (!use_graphs_ || !be_.supports_graphs() || B_ == 0 || has_graph(source, k)) return;
  Graphs g;
  g.propose = be_.capture([this, source, k] { issue_propose(source, k); });
  g.verify = be_.capture([this, source, k] { issue_verify(source, k, B_ * (k + 1), 0, 0); });
  graphs_.emplace(Key{static_cast<int>(source), B_, k, flags()}, std::move(g));
}

bool Iteration::can_carry() const {
  return be_.runs_on_host() && !(use_graphs_ && be_.supports_graphs());
}

int Iteration::carry_room(int k) const {
  return can_carry() && B_ > 0 ? std::max(0, target_.limits().max_rows - B_ * (k + 1)) : 0;
}

void Iteration::carry(PromptRows rows) {
  const int n = rows.size(), n_logits = static_cast<int>(rows.logit_rows.size());
  if (!can_carry() || n_logits > n || n_logits > max_batch_ ||
      static_cast<int>(rows.pos.size()) != n || static_cast<int>(rows.slot.size()) != n)
    throw InvalidArgument("speculative iteration: cannot carry these rows");
  for (int32_t r : rows.logit_rows)
    if (r < 0 || r >= n) throw InvalidArgument("speculative iteration: bad carried logit row");
  carry_ = std::move(rows);
}

void Iteration::upload_carried(const PromptRows& c, int first) {
  const int nv = first, n = c.size();
  if (nv + n > target_.limits().max_rows)
    throw InvalidArgument("speculative iteration: too many carried rows");
  // Rows [nv, nv + n), after the verify rows. Causal attention on the tree path: the cache index
  // is the position, and the tree base lies past it (no entry is masked).
  std::vector<int32_t> base(n), lrows(nv + c.logit_rows.size());
  std::vector<uint64_t> bits(n, 0);
  for (int i = 0; i < n; ++i) base[i] = c.pos[i] + 1;
  std::iota(lrows.begin(), lrows.begin() + nv, 0);
  for (size_t i = 0; i < c.logit_rows.size(); ++i) lrows[nv + i] = nv + c.logit_rows[i];
  be_.upload(tok_.as<int32_t>() + nv, c.tok.data(), n * 4);
  be_.upload(pos_.as<int32_t>() + nv, c.pos.data(), n * 4);
  be_.upload(row_slots_.as<int32_t>() + nv, c.slot.data(), n * 4);
  be_.upload(kv_idx_.as<int32_t>() + nv, c.pos.data(), n * 4);
  be_.upload(tree_base_.as<int32_t>() + nv, base.data(), n * 4);
  be_.upload(tree_bits_.as<uint64_t>() + nv, bits.data(), n * 8);
  be_.upload(carry_logit_rows_.as<void>(), lrows.data(), lrows.size() * 4);
}

int Iteration::compact_rows(int k) {
  const int R = k + 1;
  int32_t* tok = tok_.as<int32_t>();
  int32_t* pos = pos_.as<int32_t>();
  int32_t* slot = row_slots_.as<int32_t>();
  int32_t* kv = kv_idx_.as<int32_t>();
  int32_t* base = tree_base_.as<int32_t>();
  uint64_t* bits = tree_bits_.as<uint64_t>();
  const int32_t* slots = slots_.as<int32_t>();
  live_dest_.clear();
  int w = 0;
  for (int b = 0; b < B_; ++b) {
    // verify_rows laid out the root and the tree's n nodes as rows 0 .. n, then padding.
    const int n = std::clamp(st_.seqs[slots[b]].tree.n, 0, k);
    for (int r = 0; r <= n; ++r, ++w) {
      const int src = b * R + r;
      live_dest_.push_back(src);
      if (w == src) continue;
      tok[w] = tok[src];
      pos[w] = pos[src];
      slot[w] = slot[src];
      kv[w] = kv[src];
      base[w] = base[src];
      bits[w] = bits[src];
    }
  }
  return w;
}

void Iteration::run(DraftSource source, int k, const std::function<void()>& between) {
  const PromptRows carried = std::exchange(carry_, PromptRows{});  // (this run's, even on a throw)
  if (k < 0 || k > max_k_) throw InvalidArgument("speculative iteration: bad draft length");
  if (B_ == 0) throw InvalidArgument("speculative iteration: no sequences set");
  if ((source == DraftSource::kNone) != (k == 0) || (k > 0 && !proposer(source)))
    throw InvalidArgument(std::string("speculative iteration: no proposer for '") +
                          draft_source_name(source) + "' with k = " + std::to_string(k));
  const Key key{static_cast<int>(source), B_, k, flags()};
  last_k_ = k;
  run_source_ = source;
  const Graphs* g = nullptr;
  if (use_graphs_ && be_.supports_graphs()) {
    capture(source, k);  // (normally done already, before the caller's timing)
    auto it = graphs_.find(key);
    if (it != graphs_.end() && it->second.propose && it->second.verify) g = &it->second;
  }
  if (carried.size() > 0 && (!can_carry() || g))
    throw InvalidArgument("speculative iteration: carried rows need the ops issued one by one");
  warm_up_ = ran_.insert(key).second && !be_.runs_on_host();
  // The timers' points lie around and between the parts, outside any captured graph.
  draft_timer_->start();
  if (g)
    g->propose->launch();
  else
    issue_propose(source, k);
  draft_timer_->stop();
  if (between) between();
  verify_timer_->start();
  // Padding rows are skipped where the metadata is host memory and no graph fixed the rows.
  last_rows_ = !g && k > 0 && skips_padding() ? compact_rows(k) : B_ * (k + 1);
  if (carried.size() > 0) upload_carried(carried, last_rows_);
  if (g)
    g->verify->launch();
  else
    issue_verify(source, k, last_rows_, carried.size(),
                 static_cast<int>(carried.logit_rows.size()));
  verify_timer_->stop();
  carried_logits_ = logits_.as<float>() + static_cast<size_t>(B_) * (k + 1) * vocab_t_;
  carried_row0_ = B_ * (k + 1);
}

PhaseTimes Iteration::times() {
  return PhaseTimes{draft_timer_->seconds(), verify_timer_->seconds()};
}

void Iteration::issue_propose(DraftSource source, int k) {
  IterationContext ctx = context();
  forced_.assign(B_, 0);
  if (k > 0) proposer(source)->issue_propose(ctx, k);
  ops_->verify_rows(st_, ctx.slots, B_, k, source, ctx.rows);  // [B, k+1]: root, nodes
}

void Iteration::issue_verify(DraftSource source, int k, int rows, int carried, int carried_logits) {
  IterationContext ctx = context();
  const int B = B_;
  const int n = B * (k + 1);  // [B, k + 1] verify rows (`rows` of them laid out), then carried
  float* logits = logits_.as<float>();
  Rows all = ctx.rows.rows(true);
  all.prompt_from = rows;               // the carried rows read prompts
  float* hidden = hidden_.as<float>();  // (null: no proposer reads them)
  target_.forward(all, rows + carried, carried > 0 ? carry_logit_rows_.as<int32_t>() : ctx.identity,
                  rows + carried_logits, logits, hidden);
  if (rows < n) {
    // Compacted (host memory): each buffer of per-row results [rows + carried, width] spreads to
    // the [B, k + 1] layout with its carried rows after it. Each row moves up (its destination is
    // at or past it, in the same order), so the last moves first.
    const auto spread = [&](float* buf, size_t width, int carried_rows) {
      if (carried_rows > 0)
        std::memmove(buf + n * width, buf + rows * width, carried_rows * width * sizeof(float));
      for (int j = rows - 1; j >= 0; --j)
        if (live_dest_[j] != j)
          std::memmove(buf + live_dest_[j] * width, buf + j * width, width * sizeof(float));
    };
    const size_t D = target_.config().dim;
    spread(logits, vocab_t_, carried_logits);  // (only the carried rows' kept logits)
    if (hidden) spread(hidden, D, 0);
    for (size_t t = 0; t < target_.tap_layers().size(); ++t)  // (Model::set_taps: every row)
      spread(target_.tap(static_cast<int>(t)), D, carried);
  }
  ctx.hidden = hidden;  // [B, k + 1, D]
  ctx.k = k;
  ctx.verified = true;
  if (penalties_ && pen_.params) ops_->penalize(st_, pen_, ctx.slots, B, k, logits, vocab_t_);
  if (masks_) ops_->mask_rows(logits, n, vocab_t_, mask_.as<uint32_t>(), mask_words());
  ops_->accept(st_, ctx.slots, B, k, logits_.as<float>(), vocab_t_, q_.as<float>(), vocab_d_,
               KvMoves{mv_slot_.as<int32_t>(), mv_src_.as<int32_t>(), mv_dst_.as<int32_t>()});
  if (penalties_ && pen_.params) ops_->count_emitted(st_, pen_, ctx.slots, B);
  if (logprobs_) {  // [B, k + 1] entries: each emitted token at the row it was drawn from
    int32_t* lr = lp_rows_.as<int32_t>();
    int32_t* lt = lp_tok_.as<int32_t>();
    int32_t* ls = lp_slot_.as<int32_t>();
    ops_->emitted_rows(st_, ctx.slots, B, k, lr, lt, ls);
    be_.logprobs(logits_.as<float>(), vocab_t_, n, lr, lt, ls, st_.states,
                 lp_out_.as<TokenLogprob>());
  }
  if (k > 0 && proposer(source)->proposes_trees())  // (a chain's accepted nodes stay in place)
    be_.kv_copy(target_.kv(), mv_slot_.as<int32_t>(), mv_src_.as<int32_t>(), mv_dst_.as<int32_t>(),
                B * kMaxDraftNodes);
  Proposer* done[kDraftSourceCount] = {};
  for (int i = 0; i < kDraftSourceCount; ++i) {
    Proposer* p = proposers_[i];
    if (p && std::find(done, done + i, p) == done + i) p->issue_after_accept(ctx);
    done[i] = p;
  }
}

void Iteration::replace_trees(const std::vector<SeqState>& seqs, const std::vector<int>& slots) {
  if (!skips_padding()) throw InvalidArgument("replace_trees: the verify rows are fixed here");
  for (int s : slots) st_.seqs[s].tree = seqs[s].tree;  // (host memory)
  IterationContext ctx = context();
  ops_->verify_rows(st_, ctx.slots, B_, last_k_, run_source_, ctx.rows);
}

void Iteration::read_states(std::vector<SeqState>& out) {
  out.resize(max_batch_);
  be_.download(out.data(), st_.seqs, sizeof(SeqState) * max_batch_);
}

}  // namespace trt_spec
