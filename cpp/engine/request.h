// request.h: what one generation request asks for, how it ended, and its validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/sampling.h"

namespace trt_spec {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (EOS included)
};

enum class StopReason { kNone, kStopToken, kMaxNewTokens, kMaxSeqLen };
const char* stop_reason_name(StopReason r);

// Throw InvalidArgument with a message naming the parameter.
void validate_sampling(const SamplingParams& s);
void validate_request(const GenerateRequest& req, int vocab, int max_seq_len);

}  // namespace trt_spec
