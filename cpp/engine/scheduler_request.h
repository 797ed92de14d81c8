// scheduler_request.h: the scheduler's record of one request (private to the scheduler's
// files: scheduler.cpp, prefill.cpp, draft_choice.cpp): its limits and sources, its place in the
// prefill, the host copy of its sequence state, its stop matcher and its statistics.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/scheduler.h"

namespace trt_spec {

// The scheduler's clock (seconds; steady).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Scheduler::Request {
  uint64_t id = 0;
  GenerateRequest req;
  int32_t allowed = 0;  // the draft sources the request allows (bits draft_source_bit)
  int32_t sources = 0;  // ... that it may use now (sync_sources)
  int max_nodes = 0;
  PenaltyParams penalties;  // request_penalties(req)
  int slot = -1;
  int prefilled = 0;      // prompt tokens in the target's cache
  bool decoding = false;  // prefill done, first token emitted
  bool cancelled = false;
  std::vector<int32_t> tokens;  // prompt + generated, `last` included (catch-up reads it)
  int generated = 0;            // tokens emitted to the caller
  SeqState seq;                 // host copy, read back after each iteration
  StopMatcher stop;
  RequestStats stats;
  FinishReason reason = FinishReason::kNone;
  double t_submit = 0.0, t_admit = 0.0;

  // What its rows need beyond the sampling rule.
  bool wants_logprobs() const { return req.sampling.logprobs >= 0; }
  bool penalized() const { return penalties.active != 0; }
  bool constrained() const { return req.constraint != nullptr; }
};

}  // namespace trt_spec
