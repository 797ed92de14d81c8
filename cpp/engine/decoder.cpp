// decoder.cpp: prefill, draft catch-up, the per-iteration choice of k and the bookkeeping of
// emitted tokens (decoder.h).
#include "engine/decoder.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "common/errors.h"

namespace trt_spec {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Decoder::Decoder(Runtime& rt)
    : rt_(rt),
      program_(rt.backend(), rt.target(), rt.draft(), rt.max_batch(), rt.draft_len()),
      controller_(rt.max_batch(), rt.draft_len()) {
  Backend& be = rt.backend();
  int R = rt.target().limits().max_rows;
  if (rt.draft()) R = std::max(R, rt.draft()->limits().max_rows);
  tok_ = BackendBuffer(be, R * 4);
  pos_ = BackendBuffer(be, R * 4);
  row_slot_ = BackendBuffer(be, R * 4);
  rows_ = BackendBuffer(be, 4);
  logits_ = BackendBuffer(be, static_cast<size_t>(rt.vocab_size()) * 4);
  sampled_ = BackendBuffer(be, 4);
  slots_.resize(rt.max_batch());
}

void Decoder::set_draft_len(int k) {
  if (k < -1 || k > rt_.draft_len()) {
    if (rt_.draft_len() == 0)
      throw InvalidArgument("draft_len " + std::to_string(k) +
                            ": this engine has no draft model (use 0, target-only)");
    throw InvalidArgument("draft_len must be 'auto' or in [0, " + std::to_string(rt_.draft_len()) +
                          "] (the engine's --draft-len), got " + std::to_string(k));
  }
  draft_len_ = k;
}

int Decoder::add(const GenerateRequest& req) {
  validate_request(req, rt_.vocab_size(), rt_.max_seq_len());
  int slot = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()) && slot < 0; ++i)
    if (!slots_[i].used) slot = i;
  if (slot < 0)
    throw InvalidArgument("all " + std::to_string(slots_.size()) +
                          " sequence slots are in use (the engine's max_batch)");
  Slot& s = slots_[slot];
  s = Slot{};
  s.used = true;
  s.req = req;
  s.tokens = req.prompt;
  s.stats.accepted_hist.assign(rt_.draft_len() + 1, 0);
  s.est = controller_.prior();
  if (req.max_new_tokens == 0) {
    s.reason = StopReason::kMaxNewTokens;
    s.used = false;
  }
  SamplingState st{req.sampling, 0};
  rt_.backend().upload(program_.states() + slot, &st, sizeof(st));
  return slot;
}

void Decoder::cancel(int slot) {
  Slot& s = slots_.at(slot);
  if (s.reason == StopReason::kNone) s.reason = StopReason::kMaxNewTokens;
  s.used = false;
}

bool Decoder::running() const {
  for (const Slot& s : slots_)
    if (s.used && s.reason == StopReason::kNone) return true;
  return false;
}

// Runs rows tokens[0, n) at positions first_pos.. of one slot through a model, in chunks of its
// row budget; with want_logits the last row's logits land in logits_.
void Decoder::forward_rows(Model& m, const int32_t* tokens, int n, int first_pos, int slot,
                           bool want_logits) {
  Backend& be = rt_.backend();
  const int R = m.limits().max_rows;
  std::vector<int32_t> pos(R), slots(R, slot);
  be.upload(row_slot_.as<void>(), slots.data(), R * 4);
  for (int s = 0; s < n; s += R) {
    const int c = std::min(R, n - s);
    std::iota(pos.begin(), pos.begin() + c, first_pos + s);
    be.upload(tok_.as<void>(), tokens + s, c * 4);
    be.upload(pos_.as<void>(), pos.data(), c * 4);
    const bool logits = want_logits && s + c == n;
    const int32_t last_row = c - 1;
    if (logits) be.upload(rows_.as<void>(), &last_row, 4);
    m.forward(tok_.as<int32_t>(), pos_.as<int32_t>(), row_slot_.as<int32_t>(), c,
              rows_.as<int32_t>(), logits ? 1 : 0, logits_.as<float>());
  }
}

bool Decoder::emit(Slot& s, int32_t tok, std::vector<int32_t>& out) {
  out.push_back(tok);
  s.generated += 1;
  const auto& stops = s.req.stop_ids;
  if (std::find(stops.begin(), stops.end(), tok) != stops.end())
    s.reason = StopReason::kStopToken;
  else if (s.generated >= s.req.max_new_tokens)
    s.reason = StopReason::kMaxNewTokens;
  return s.reason == StopReason::kNone;
}

std::vector<int32_t> Decoder::prefill(int slot) {
  Slot& s = slots_[slot];
  Backend& be = rt_.backend();
  const double t0 = now_s();
  const int P = static_cast<int>(s.req.prompt.size());
  forward_rows(rt_.target(), s.req.prompt.data(), P, 0, slot, true);
  const int32_t slot32 = slot;
  be.upload(row_slot_.as<void>(), &slot32, 4);
  be.sample(logits_.as<float>(), 1, rt_.vocab_size(), row_slot_.as<int32_t>(), program_.states(),
            sampled_.as<int32_t>());
  int32_t first = -1;
  be.download(&first, sampled_.as<void>(), 4);
  s.prefilled = true;
  s.seq = SeqState{};
  s.seq.n_past = P;
  s.seq.last = first;
  s.seq.prev = s.req.prompt.back();
  s.seq.n_gen = 1;
  be.upload(program_.seqs() + slot, &s.seq, sizeof(SeqState));
  s.tokens.push_back(first);
  // The draft reads the prompt too when this request may speculate (part of time to first token).
  if (rt_.draft() && draft_len_ != 0) catch_up_draft(s, slot);
  s.stats.prefill_s = now_s() - t0;
  std::vector<int32_t> out;
  if (emit(s, first, out) && s.seq.n_past >= rt_.max_seq_len()) s.reason = StopReason::kMaxSeqLen;
  return out;
}

// Brings the draft's cache to positions [0, n_past - 1) (the iteration feeds n_past - 1 itself).
void Decoder::catch_up_draft(Slot& s, int slot) {
  const int n = s.draft_lag();
  if (n == 0) return;
  const double t0 = now_s();
  forward_rows(*rt_.draft(), s.tokens.data() + s.draft_valid, n, s.draft_valid, slot, false);
  s.draft_valid += n;
  const double dt = now_s() - t0;
  s.stats.catch_up_s += dt;
  controller_.observe_catch_up(n, dt);
}

int Decoder::choose_k(const std::vector<int>& active) {
  // Room: verify writes positions up to n_past + k (< max_seq_len); drafting past the most
  // tokens any sequence may still emit is wasted.
  int limit = rt_.draft_len(), most_left = 0;
  for (int slot : active) {
    const Slot& s = slots_[slot];
    limit = std::min(limit, rt_.max_seq_len() - 1 - s.seq.n_past);
    most_left = std::max(most_left, s.req.max_new_tokens - s.generated);
  }
  limit = std::max(0, std::min(limit, most_left - 1));
  if (draft_len_ >= 0) return std::min(draft_len_, limit);
  std::vector<double> alphas;
  int lag = 0;
  for (int slot : active) {
    const Slot& s = slots_[slot];
    alphas.push_back(s.est.alpha());
    lag += s.draft_lag();
  }
  return controller_.choose(static_cast<int>(active.size()), alphas, limit, lag);
}

std::vector<Decoder::Event> Decoder::step() {
  std::vector<Event> events;
  // Requests added since the last step: prefill each, emitting its first token.
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    Slot& s = slots_[i];
    if (s.used && !s.prefilled && s.reason == StopReason::kNone) events.push_back({i, prefill(i)});
  }
  if (!events.empty()) {
    for (const Event& e : events)
      if (slots_[e.slot].reason != StopReason::kNone) slots_[e.slot].used = false;
    return events;
  }
  std::vector<int> active;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i)
    if (slots_[i].used && slots_[i].reason == StopReason::kNone) active.push_back(i);
  if (active.empty()) return events;

  const int B = static_cast<int>(active.size());
  const int k = choose_k(active);
  if (k > 0)
    for (int slot : active) catch_up_draft(slots_[slot], slot);
  if (active != program_slots_) {
    program_.set_slots(active.data(), B);
    program_slots_ = active;
  }
  // Phase times cost nothing on a backend that runs on the host; elsewhere they would add a
  // synchronisation inside the iteration, so only the whole iteration is timed.
  const bool on_host = rt_.backend().runs_on_host();
  const double t0 = now_s();
  last_times_ = PhaseTimes{};
  program_.run(k, on_host ? &last_times_ : nullptr);
  last_B_ = B;
  last_k_ = k;

  std::vector<SeqState> seqs(slots_.size());
  rt_.backend().download(seqs.data(), program_.seqs(), sizeof(SeqState) * seqs.size());
  const double total_s = now_s() - t0;
  if (on_host) {
    controller_.observe(B, k, total_s, last_times_.draft_s, last_times_.verify_s);
  } else {
    last_times_.verify_s = total_s;  // the whole iteration
    controller_.observe(B, k, total_s, -1.0, -1.0);
  }
  for (int slot : active) {
    Slot& s = slots_[slot];
    s.seq = seqs[slot];
    RequestStats& st = s.stats;
    st.iterations += 1;
    st.draft_s += last_times_.draft_s;  // the whole batch's iteration: what this request waited
    st.verify_s += last_times_.verify_s;
    if (k > 0) {
      st.spec_iterations += 1;
      st.drafted += k;
      st.accepted += s.seq.n_acc;
      st.accepted_hist[s.seq.n_acc] += 1;
      s.est.observe(s.seq.n_acc, k);
      controller_.observe_acceptance(s.seq.n_acc, k);
      s.draft_valid = s.seq.n_past - 1;
    } else if (rt_.draft()) {
      s.est.relax(controller_.long_run_alpha());  // nothing observed: back toward the mean
    }
    Event e{slot, {}};
    for (int i = 0; i < s.seq.n_new; ++i) {
      s.tokens.push_back(s.seq.out[i]);
      if (!emit(s, s.seq.out[i], e.tokens)) break;
    }
    st.emitted += static_cast<int>(e.tokens.size());
    if (s.reason == StopReason::kNone && s.seq.n_past >= rt_.max_seq_len())
      s.reason = StopReason::kMaxSeqLen;  // no position left to feed the newest token
    if (s.reason != StopReason::kNone) s.used = false;
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace trt_spec
