// generator.cpp: request validation, prefill in chunks and the target-only step (generator.h).
#include "runtime/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/errors.h"

namespace trt_spec {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kMaxSeqLen: return "max_seq_len";
  }
  return "";
}

void validate_sampling(const SamplingParams& s) {
  if (!std::isfinite(s.temperature) || s.temperature < 0.0f)
    throw InvalidArgument("temperature must be a finite number >= 0, got " +
                          std::to_string(s.temperature));
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    throw InvalidArgument("top_p must lie in (0, 1], got " + std::to_string(s.top_p));
  if (s.top_k < 0) throw InvalidArgument("top_k must be >= 0, got " + std::to_string(s.top_k));
}

void validate_request(const GenerateRequest& req, int vocab, int max_seq_len) {
  const SamplingParams& s = req.sampling;
  if (req.prompt.empty())
    throw InvalidArgument("the prompt is empty (it needs at least one token)");
  if (static_cast<int64_t>(req.prompt.size()) > max_seq_len)
    throw InvalidArgument("the prompt has " + std::to_string(req.prompt.size()) +
                          " tokens, more than this engine's max_seq_len of " +
                          std::to_string(max_seq_len) + " (rebuild with a larger --max-seq-len)");
  check_token_ids(req.prompt, vocab, "the prompt");
  check_token_ids(req.stop_ids, vocab, "stop");
  if (req.max_new_tokens < 0)
    throw InvalidArgument("max_new_tokens must be >= 0, got " + std::to_string(req.max_new_tokens));
  validate_sampling(s);
}

Generator::Generator(Runtime& rt, int slot) : rt_(rt), slot_(slot) {
  if (slot < 0 || slot >= rt.max_batch()) throw InvalidArgument("KV slot out of range");
  Backend& be = rt.backend();
  const int R = rt.target().limits().max_rows;
  tok_ = BackendBuffer(be, R * 4);
  pos_ = BackendBuffer(be, R * 4);
  slot_buf_ = BackendBuffer(be, R * 4);
  rows_ = BackendBuffer(be, 4);
  logits_ = BackendBuffer(be, static_cast<size_t>(rt.vocab_size()) * 4);
  sampled_ = BackendBuffer(be, 4);
  states_ = BackendBuffer(be, sizeof(SamplingState) * rt.max_batch());
  std::vector<int32_t> s(R, slot);
  be.upload(slot_buf_.as<void>(), s.data(), R * 4);
  host_pos_.resize(R);
}

void Generator::start(const GenerateRequest& req) {
  validate_request(req, rt_.vocab_size(), rt_.max_seq_len());
  req_ = req;
  started_ = true;
  prefilled_ = false;
  reason_ = req.max_new_tokens == 0 ? StopReason::kMaxNewTokens : StopReason::kNone;
  len_ = 0;
  generated_ = 0;
  last_ = -1;
  SamplingState st{req.sampling, 0};
  rt_.backend().upload(states_.as<SamplingState>() + slot_, &st, sizeof(st));
}

// Runs n rows at positions first_pos.. of this slot; samples a token from the last row.
int32_t Generator::run_rows(const int32_t* tokens, int n, int first_pos, bool want_token) {
  Backend& be = rt_.backend();
  std::iota(host_pos_.begin(), host_pos_.begin() + n, first_pos);
  be.upload(tok_.as<void>(), tokens, n * 4);
  be.upload(pos_.as<void>(), host_pos_.data(), n * 4);
  int32_t last_row = n - 1;
  be.upload(rows_.as<void>(), &last_row, 4);
  rt_.target().forward(tok_.as<int32_t>(), pos_.as<int32_t>(), slot_buf_.as<int32_t>(), n,
                       rows_.as<int32_t>(), want_token ? 1 : 0, logits_.as<float>());
  if (!want_token) return -1;
  be.sample(logits_.as<float>(), 1, rt_.vocab_size(), slot_buf_.as<int32_t>(),
            states_.as<SamplingState>(), sampled_.as<int32_t>());
  int32_t t = -1;
  be.download(&t, sampled_.as<void>(), 4);  // the one synchronisation of the step
  return t;
}

void Generator::finish_if_needed(int32_t tok) {
  if (std::find(req_.stop_ids.begin(), req_.stop_ids.end(), tok) != req_.stop_ids.end())
    reason_ = StopReason::kStopToken;
  else if (generated_ >= req_.max_new_tokens)
    reason_ = StopReason::kMaxNewTokens;
  else if (len_ >= rt_.max_seq_len())
    reason_ = StopReason::kMaxSeqLen;  // no position left to feed the newest token
}

std::vector<int32_t> Generator::step() {
  if (!started_) throw InvalidArgument("step() before start()");
  if (done()) return {};
  int32_t t = -1;
  if (!prefilled_) {
    const int P = static_cast<int>(req_.prompt.size());
    const int R = rt_.target().limits().max_rows;
    for (int s = 0; s < P; s += R) {
      int n = std::min(R, P - s);
      t = run_rows(req_.prompt.data() + s, n, s, s + n == P);
    }
    prefilled_ = true;
    len_ = P;
  } else {
    t = run_rows(&last_, 1, len_, true);
    len_ += 1;
  }
  last_ = t;
  generated_ += 1;
  finish_if_needed(t);
  return {t};
}

}  // namespace trt_spec
