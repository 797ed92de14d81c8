// request.cpp: request validation and draft settings (request.h).
#include "engine/request.h"

#include <cmath>

#include "common/errors.h"
#include "engine/runtime.h"

namespace trt_spec {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kMaxNewTokens: return "max_new_tokens";
    case FinishReason::kMaxSeqLen: return "max_seq_len";
    case FinishReason::kCancelled: return "cancelled";
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
  if (s.logprobs < -1 || s.logprobs > kMaxTopLogprobs)
    throw InvalidArgument("logprobs must lie in [0, " + std::to_string(kMaxTopLogprobs) +
                          "] (or -1: none), got " + std::to_string(s.logprobs));
}

void validate_request(const GenerateRequest& req, const RequestLimits& lim) {
  if (req.prompt.empty())
    throw InvalidArgument("the prompt is empty (it needs at least one token)");
  if (static_cast<int64_t>(req.prompt.size()) > lim.max_seq_len)
    throw InvalidArgument("the prompt has " + std::to_string(req.prompt.size()) +
                          " tokens, more than this engine's max_seq_len of " +
                          std::to_string(lim.max_seq_len) +
                          " (rebuild with a larger --max-seq-len)");
  check_token_ids(req.prompt, lim.vocab, "the prompt");
  check_token_ids(req.stop_ids, lim.vocab, "stop");
  check_token_ids(req.prediction, lim.vocab, "the prediction");
  if (req.max_new_tokens < 0)
    throw InvalidArgument("max_new_tokens must be >= 0, got " + std::to_string(req.max_new_tokens));
  for (const std::string& s : req.stop_strings)
    if (s.empty()) throw InvalidArgument("stop strings must not be empty");
  validate_sampling(req.sampling);
  if (!std::isfinite(req.repetition_penalty) || req.repetition_penalty <= 0.0f ||
      req.repetition_penalty > 100.0f)
    throw InvalidArgument("repetition_penalty must lie in (0, 100], got " +
                          std::to_string(req.repetition_penalty));
  for (const auto& [name, v] :
       {std::pair<const char*, float>{"frequency_penalty", req.frequency_penalty},
        {"presence_penalty", req.presence_penalty}})
    if (!(v >= -2.0f && v <= 2.0f))
      throw InvalidArgument(std::string(name) + " must lie in [-2, 2], got " + std::to_string(v));
  if (req.logit_bias.size() > static_cast<size_t>(kMaxLogitBias))
    throw InvalidArgument("logit_bias holds " + std::to_string(req.logit_bias.size()) +
                          " entries, more than " + std::to_string(kMaxLogitBias));
  for (const auto& [id, bias] : req.logit_bias) {
    if (id < 0 || id >= lim.vocab)
      throw InvalidArgument("logit_bias: token id " + std::to_string(id) +
                            " outside the vocabulary [0, " + std::to_string(lim.vocab) + ")");
    if (!(bias >= -100.0f && bias <= 100.0f))
      throw InvalidArgument("logit_bias: the bias of token " + std::to_string(id) +
                            " must lie in [-100, 100], got " + std::to_string(bias));
  }
  const std::string& d = req.draft;
  if (d != "auto" && d != "model" && d != "lookup" && d != "none")
    throw InvalidArgument("draft must be 'auto', 'model', 'lookup' or 'none', got '" + d + "'");
  if (d == "model" && !lim.has_draft_model)
    throw InvalidArgument("draft='model': this engine has no draft model (use 'lookup' or 'auto')");
  if (d != "none" && d != "auto" && lim.max_draft_len == 0)
    throw InvalidArgument("draft='" + d + "': this engine was built with --draft-len 0");
  if (!req.draft_len) return;
  const int k = *req.draft_len;
  if (k < 0)
    throw InvalidArgument("draft_len must be 'auto' or an integer >= 0, got " + std::to_string(k));
  if (k > lim.max_draft_len) {
    if (lim.max_draft_len == 0)
      throw InvalidArgument("draft_len " + std::to_string(k) +
                            ": this engine does not speculate (use 0 or 'auto')");
    throw InvalidArgument("draft_len must be 'auto' or in [0, " +
                          std::to_string(lim.max_draft_len) + "] (the engine's --draft-len), got " +
                          std::to_string(k));
  }
}

int32_t request_sources(const GenerateRequest& req, const RequestLimits& lim) {
  if (req.draft == "none" || req.draft_len == 0 || lim.max_draft_len == 0) return 0;
  int32_t s = 0;
  if ((req.draft == "auto" || req.draft == "model") && lim.has_draft_model)
    s |= draft_source_bit(DraftSource::kModel);
  if (req.draft == "auto" || req.draft == "lookup") s |= draft_source_bit(DraftSource::kLookup);
  return s;
}

int request_max_nodes(const GenerateRequest& req, const RequestLimits& lim) {
  return req.draft_len.value_or(lim.max_draft_len);
}

PenaltyParams request_penalties(const GenerateRequest& req) {
  PenaltyParams p;
  p.repetition = req.repetition_penalty;
  p.frequency = req.frequency_penalty;
  p.presence = req.presence_penalty;
  for (const auto& [id, bias] : req.logit_bias) {
    if (p.n_bias >= kMaxLogitBias) break;
    p.bias_id[p.n_bias] = id;
    p.bias[p.n_bias++] = bias;
  }
  p.active = penalties_active(p.repetition, p.frequency, p.presence, p.n_bias) ? 1 : 0;
  return p;
}

}  // namespace trt_spec
