// events.h: requests in and scheduler events out, as Python values; shared by the public module
// (core.cpp) and the test module (session_testing.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace trt_spec::bindings {

namespace nb = nanobind;
using namespace nb::literals;

inline GenerateRequest make_request(const std::vector<int32_t>& prompt, int max_new_tokens,
                                    float temperature, int top_k, float top_p, uint64_t seed,
                                    const std::vector<int32_t>& stop_ids,
                                    const std::vector<std::string>& stop_strings,
                                    const std::vector<int32_t>& prediction,
                                    const std::string& draft, int draft_len) {
  GenerateRequest req;
  req.prompt = prompt;
  req.max_new_tokens = max_new_tokens;
  req.sampling = SamplingParams{temperature, top_k, top_p, seed};
  req.stop_ids = stop_ids;
  req.stop_strings = stop_strings;
  req.prediction = prediction;
  req.draft = draft;
  req.draft_len = draft_len;
  return req;
}

// The keyword arguments of make_request, for .def().
#define SUBMIT_ARGS                                                                              \
  "prompt"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f, \
              "seed"_a = 0, "stop_ids"_a = std::vector<int32_t>{},                               \
              "stop_strings"_a = std::vector<std::string>{},                                     \
              "prediction"_a = std::vector<int32_t>{}, "draft"_a = "auto", "draft_len"_a = -1

inline nb::dict stats_dict(const RequestStats& s) {
  nb::dict r;
  r["prompt_tokens"] = s.prompt_tokens;
  r["iterations"] = s.iterations;
  r["spec_iterations"] = s.spec_iterations;
  r["drafted"] = s.drafted;
  r["accepted"] = s.accepted;
  r["emitted"] = s.emitted;
  nb::dict by;
  for (int i = 0; i < kDraftSourceCount; ++i) {
    nb::dict d;
    d["iterations"] = s.iterations_by_source[i];
    d["drafted"] = s.drafted_by_source[i];
    d["accepted"] = s.accepted_by_source[i];
    by[draft_source_name(static_cast<DraftSource>(i))] = d;
  }
  r["by_source"] = by;
  r["prediction_accepted"] = s.prediction_accepted;
  r["prediction_rejected"] = s.prediction_rejected;
  r["accepted_hist"] = s.accepted_hist;
  nb::dict hist_by;
  for (int i = 0; i < kDraftSourceCount; ++i)
    hist_by[draft_source_name(static_cast<DraftSource>(i))] = s.accepted_hist_by_source[i];
  r["accepted_hist_by_source"] = hist_by;
  r["sources"] = s.sources;
  r["draft_model_skipped"] = s.draft_model_skipped;
  r["prompt_attention"] = s.prompt_attention;
  r["queue_s"] = s.queue_s;
  r["prefill_s"] = s.prefill_s;
  r["draft_s"] = s.draft_s;
  r["verify_s"] = s.verify_s;
  r["catch_up_s"] = s.catch_up_s;
  r["ttft_s"] = s.ttft_s;
  r["total_s"] = s.total_s;
  r["token_times"] = s.token_times;
  return r;
}

// [(id, new tokens, new text bytes, finished, reason, stats dict or None)]
inline nb::list events_list(std::vector<SchedulerEvent>& ev) {
  nb::list out;
  for (SchedulerEvent& e : ev) {
    nb::object stats = e.finished ? nb::object(stats_dict(e.stats)) : nb::none();
    out.append(nb::make_tuple(e.id, e.tokens, nb::bytes(e.text.data(), e.text.size()), e.finished,
                              finish_reason_name(e.reason), stats));
  }
  return out;
}

}  // namespace trt_spec::bindings
