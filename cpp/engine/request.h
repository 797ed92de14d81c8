// request.h: what one generation request asks for, how it ended, and its validation (the one
// place requests are checked; the Python layer only converts types).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/constraint.h"
#include "kernels/penalties.h"
#include "kernels/sampling.h"
#include "spec/draft_tree.h"

namespace trt_spec {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 128;
  SamplingParams sampling;
  // Penalties and logit bias (kernels/penalties.h): at every position, from the text up to it.
  float repetition_penalty = 1.0f;      // > 0; 1: off
  float frequency_penalty = 0.0f;       // [-2, 2]
  float presence_penalty = 0.0f;        // [-2, 2]
  std::map<int32_t, float> logit_bias;  // token id -> bias in [-100, 100], at most kMaxLogitBias
  // Structured output: the tokens allowed at each position (null: any).
  std::shared_ptr<TokenConstraint> constraint;
  std::vector<int32_t> stop_ids;          // generation ends after emitting one (EOS included)
  std::vector<std::string> stop_strings;  // ... or once the output text contains one (cut there)
  std::vector<int32_t> prediction;        // predicted output (a lookup source; max_seq_len used)
  std::string draft = "auto";             // draft source: "auto", "model", "lookup" or "none"
  // Draft tokens per iteration: k (0: no draft), at most RequestLimits::max_draft_len; none: auto
  // (the controllers choose, up to max_draft_len).
  std::optional<int> draft_len;
};

enum class FinishReason { kNone, kStopToken, kStopString, kMaxNewTokens, kMaxSeqLen, kCancelled };
const char* finish_reason_name(FinishReason r);
constexpr const char* kDraftModes[] = {"auto", "model", "lookup", "none"};

// What an engine offers a request: its limits and which draft sources exist.
struct RequestLimits {
  int vocab = 0;
  int max_seq_len = 0;
  int max_draft_len = 0;  // 0: no speculation at all
  bool has_draft_model = false;
};

// Throw InvalidArgument with a message naming the parameter.
void validate_sampling(const SamplingParams& s);
void validate_request(const GenerateRequest& req, const RequestLimits& lim);
// The allowed sources (bits draft_source_bit) of a valid request, and its node cap.
int32_t request_sources(const GenerateRequest& req, const RequestLimits& lim);
int request_max_nodes(const GenerateRequest& req, const RequestLimits& lim);
// The request's penalties as the device reads them (active: any is not at its default).
PenaltyParams request_penalties(const GenerateRequest& req);

}  // namespace trt_spec
