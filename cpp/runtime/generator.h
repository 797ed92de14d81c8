// generator.h: one request's token loop over a Runtime: prefill, then one target step per
// call (the speculative decoder replaces the step with a draft-verify iteration).
//
// start() validates the request and resets the KV slot; each step() returns the tokens that
// became final during that call (the first call prefills and returns the first token). The
// bindings release the GIL around step(), so Python can stream while the engine runs.
#pragma once

#include <string>
#include <vector>

#include "runtime/runtime.h"

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

class Generator {
 public:
  explicit Generator(Runtime& rt, int slot = 0);

  void start(const GenerateRequest& req);
  std::vector<int32_t> step();
  bool done() const { return reason_ != StopReason::kNone; }
  StopReason stop_reason() const { return reason_; }
  int generated() const { return generated_; }
  int context_len() const { return len_; }  // tokens in the KV cache

 private:
  int32_t run_rows(const int32_t* tokens, int n, int first_pos, bool want_token);
  void finish_if_needed(int32_t tok);

  Runtime& rt_;
  int slot_;
  GenerateRequest req_;
  bool started_ = false, prefilled_ = false;
  StopReason reason_ = StopReason::kNone;
  int len_ = 0;  // positions filled in the cache
  int generated_ = 0;
  int32_t last_ = -1;  // newest token, not yet in the cache
  BackendBuffer tok_, pos_, slot_buf_, rows_, logits_, sampled_, states_;
  std::vector<int32_t> host_pos_;
};

}  // namespace trt_spec
