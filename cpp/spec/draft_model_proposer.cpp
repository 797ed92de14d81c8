// draft_model_proposer.cpp: the draft model's steps, catch-up and bookkeeping
// (draft_model_proposer.h).
#include "spec/draft_model_proposer.h"

#include <algorithm>
#include <numeric>

namespace trt_spec {

DraftModelProposer::DraftModelProposer(Backend& be, Model& draft, int max_batch, int max_k,
                                       int vocab_target)
    : be_(be),
      draft_(draft),
      vocab_common_(std::min(vocab_target, draft.config().vocab_size)),
      controller_(max_batch, max_k),
      slots_(max_batch) {
  const int R = draft.limits().max_rows;
  tok_ = BackendBuffer(be, R * 4);
  pos_ = BackendBuffer(be, R * 4);
  row_slot_ = BackendBuffer(be, R * 4);
}

void DraftModelProposer::begin(int slot, const std::vector<int32_t>& prompt, int cached) {
  SlotState& s = slots_[slot];
  const int rows = static_cast<int>(prompt.size()) - 1;  // (the first iteration feeds P - 1)
  s.off = window_ > 0 ? std::max(0, rows - window_) : 0;
  // The positions the target keeps, as far as the draft read them as prompt rows (the same
  // tokens: the target keeps only a common prefix); read_prompt() continues from there.
  const int kept = s.off == 0 ? std::min(cached, s.prompt_kept) : 0;
  s.draft_valid = std::max(s.off, kept);
  s.prompt_read = kept;
  s.prompt_kept = 0;
  s.est = controller_.prior();
}

void DraftModelProposer::end(int slot) {
  SlotState& s = slots_[slot];
  s.prompt_kept = s.off == 0 ? s.prompt_read : 0;
}

int DraftModelProposer::prompt_rows_for(int prompt_len) const {
  const int rows = std::max(0, prompt_len - 1);
  return window_ > 0 ? std::min(rows, window_) : rows;
}

void DraftModelProposer::forward_rows(const int32_t* tokens, int n, int first_pos, int slot,
                                      bool prompt) {
  const int R = draft_.limits().max_rows;
  std::vector<int32_t> pos(R), slots(R, slot);
  be_.upload(row_slot_.as<void>(), slots.data(), R * 4);
  for (int s = 0; s < n; s += R) {
    const int c = std::min(R, n - s);
    std::iota(pos.begin(), pos.begin() + c, first_pos + s - slots_[slot].off);  // draft positions
    be_.upload(tok_.as<void>(), tokens + s, c * 4);
    be_.upload(pos_.as<void>(), pos.data(), c * 4);
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
    reads_.push_back(timed_forward(tokens + (from - first_pos), end - from, from, slot, true));
    prompt_rows_read_ += end - from;
  }
  s.draft_valid = std::max(end, s.off);  // (the scheduler feeds the chunks in order)
  if (s.off == 0 && first_pos == s.prompt_read) s.prompt_read = end;
}

void DraftModelProposer::take_read_times() {
  for (TimedRows& r : reads_) {
    controller_.observe_read(r.rows, r.timer->seconds());
    spare_timers_.push_back(std::move(r.timer));
  }
  reads_.clear();
}

int DraftModelProposer::lag(int slot, int n_past) const {
  return std::max(0, n_past - 1 - slots_[slot].draft_valid);
}

void DraftModelProposer::prepare(int slot, const std::vector<int32_t>& tokens,
                                 const SeqState& seq) {
  SlotState& s = slots_[slot];
  drop_catch_up(slot);  // (one whose time was never read)
  const int n = lag(slot, seq.n_past);
  if (n == 0) return;
  // Device time: the rows are only queued here on an asynchronous backend.
  catch_ups_.push_back(timed_forward(tokens.data() + s.draft_valid, n, s.draft_valid, slot, false));
  s.draft_valid += n;
}

double DraftModelProposer::take_prepare_seconds(int slot) {
  for (auto it = catch_ups_.begin(); it != catch_ups_.end(); ++it) {
    if (it->slot != slot) continue;
    const double dt = it->timer->seconds();
    controller_.observe_catch_up(it->rows, dt);
    spare_timers_.push_back(std::move(it->timer));
    catch_ups_.erase(it);
    return dt;
  }
  return 0.0;
}

DraftModelProposer::TimedRows DraftModelProposer::timed_forward(const int32_t* tokens, int n,
                                                                int first_pos, int slot,
                                                                bool prompt) {
  TimedRows w{slot, n, take_timer()};
  w.timer->start();
  forward_rows(tokens, n, first_pos, slot, prompt);
  w.timer->stop();
  return w;
}

std::unique_ptr<Backend::Timer> DraftModelProposer::take_timer() {
  if (spare_timers_.empty()) return be_.timer();
  std::unique_ptr<Backend::Timer> t = std::move(spare_timers_.back());
  spare_timers_.pop_back();
  return t;
}

void DraftModelProposer::drop_catch_up(int slot) {
  for (auto it = catch_ups_.begin(); it != catch_ups_.end(); ++it)
    if (it->slot == slot) {
      spare_timers_.push_back(std::move(it->timer));
      catch_ups_.erase(it);
      return;
    }
}

void DraftModelProposer::issue_propose(IterationContext& ctx, int k) {
  const int B = ctx.B;
  for (int j = 0; j < k; ++j) {
    float* qj = ctx.q + static_cast<size_t>(j) * B * ctx.vocab_draft;   // [B, vocab_draft]
    if (j == 0) ctx.ops.draft_rows(ctx.st, ctx.slots, B, j, ctx.rows);  // (later steps: below)
    if (j == 0)  // [B, 2] rows: prev, last; the logits of `last` (rows 1, 3, 5, ..)
      draft_.forward(ctx.rows.rows(false), 2 * B, ctx.odd, B, qj);
    else  // [B, 1] rows: node j - 1
      draft_.forward(ctx.rows.rows(false), B, ctx.identity, B, qj);
    // ... and the rows of step j + 1 (node j), written as node j is drawn.
    ctx.ops.draft_sample(ctx.st, ctx.slots, B, j, qj, ctx.vocab_draft, vocab_common_,
                         j + 1 < k ? &ctx.rows : nullptr);
  }
}

void DraftModelProposer::commit(int slot, const SeqState& seq, bool used) {
  SlotState& s = slots_[slot];
  if (used && seq.n_drafted > 0) {
    s.est.observe(seq.n_acc, seq.depth);
    controller_.observe_acceptance(seq.n_acc, seq.depth);
    s.draft_valid = seq.n_past - 1;
  } else {
    s.est.relax(controller_.long_run_alpha());  // nothing observed: back toward the mean
  }
}

}  // namespace trt_spec
