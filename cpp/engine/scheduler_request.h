// scheduler_request.h: the scheduler's record of one request (private to the scheduler's
// files: scheduler.cpp, draft_choice.cpp): its limits and sources, its place in the prefill, the
// host copy of its sequence state, its stop matcher and its statistics.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler.h"

namespace trt_spec {

struct Scheduler::Request {
  uint64_t id = 0;
  GenerateRequest req;
  int32_t sources = 0;
  int max_nodes = 0;
  int slot = -1;
  int prefilled = 0;      // prompt tokens in the target's cache
  bool decoding = false;  // prefill done, first token emitted
  // Prompt rows [draft_read_first, draft_read_first + draft_read_n) the draft model has still to
  // read: the last prefill chunk's (and, with a prompt window, the window's rows that a prefill
  // alone left), left to the next step so that the first token reaches the caller without
  // waiting for the draft.
  int draft_read_first = 0, draft_read_n = 0;
  // With SchedulerOptions::draft_read_chunk: the draft model is left out of the request's
  // iterations (its source bit cleared) until it has read those rows.
  bool draft_reading = false;
  // draft="auto" whose draft model has not read anything yet, because the read pays against
  // plain steps but might not against prompt lookup (draft_choice.cpp, join_if_pays): the
  // seconds and tokens of its iterations so far, [0] plain steps, [1] lookup's.
  bool draft_deferred = false;
  double deferred_s[2] = {0.0, 0.0};
  int deferred_tokens[2] = {0, 0};
  bool cancelled = false;
  std::vector<int32_t> tokens;  // prompt + generated, `last` included (catch-up reads it)
  int generated = 0;            // tokens emitted to the caller
  SeqState seq;                 // host copy, read back after each iteration
  StopMatcher stop;
  RequestStats stats;
  FinishReason reason = FinishReason::kNone;
  double t_submit = 0.0, t_admit = 0.0;
};

}  // namespace trt_spec
