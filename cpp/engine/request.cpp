// request.cpp: request validation (request.h).
#include "engine/request.h"

#include <cmath>

#include "common/errors.h"
#include "engine/runtime.h"

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

}  // namespace trt_spec
