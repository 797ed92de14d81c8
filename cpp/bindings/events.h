// events.h: the scheduler's data as Python classes: Request (engine/request.h GenerateRequest),
// Event (SchedulerEvent) and RequestStats (engine/scheduler.h), bound by the public module
// (core.cpp) and by the test module (session_testing.cpp), each in its own nanobind domain.
// The classes carry the values only: requests are validated by Scheduler::submit (request.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings/constraint.h"
#include "engine/scheduler.h"

namespace trt_spec::bindings {

namespace nb = nanobind;
using namespace nb::literals;

inline GenerateRequest make_request(std::vector<int32_t> prompt, int max_new_tokens,
                                    float temperature, int top_k, float top_p, uint64_t seed,
                                    std::vector<int32_t> stop_ids,
                                    std::vector<std::string> stop_strings,
                                    std::vector<int32_t> prediction, std::string draft,
                                    std::optional<int> draft_len, int logprobs,
                                    float repetition_penalty, float frequency_penalty,
                                    float presence_penalty, std::map<int32_t, float> logit_bias) {
  GenerateRequest req;
  req.repetition_penalty = repetition_penalty;
  req.frequency_penalty = frequency_penalty;
  req.presence_penalty = presence_penalty;
  req.logit_bias = std::move(logit_bias);
  req.prompt = std::move(prompt);
  req.max_new_tokens = max_new_tokens;
  req.sampling = SamplingParams{temperature, top_k, top_p, logprobs, seed};
  req.stop_ids = std::move(stop_ids);
  req.stop_strings = std::move(stop_strings);
  req.prediction = std::move(prediction);
  req.draft = std::move(draft);
  req.draft_len = draft_len;
  return req;
}

// The arguments of make_request, for .def(): the prompt and max_new_tokens, then keywords only.
#define REQUEST_ARGS                                                                          \
  "prompt"_a, "max_new_tokens"_a = 128, nb::kw_only(), "temperature"_a = 0.0f, "top_k"_a = 0, \
              "top_p"_a = 1.0f, "seed"_a = 0, "stop_ids"_a = std::vector<int32_t>{},          \
              "stop_strings"_a = std::vector<std::string>{},                                  \
              "prediction"_a = std::vector<int32_t>{}, "draft"_a = "auto",                    \
              "draft_len"_a = nb::none(), "logprobs"_a = -1, "repetition_penalty"_a = 1.0f,   \
              "frequency_penalty"_a = 0.0f, "presence_penalty"_a = 0.0f,                      \
              "logit_bias"_a = std::map<int32_t, float> {}

// Per draft source name: f(source) of each source.
template <typename F>
auto by_source_name(F f) {
  std::map<std::string, decltype(f(0))> out;
  for (int i = 0; i < kDraftSourceCount; ++i)
    out[draft_source_name(static_cast<DraftSource>(i))] = f(i);
  return out;
}

inline void bind_scheduler_types(nb::module_& m) {
  bind_token_constraint(m);
  nb::class_<GenerateRequest>(m, "Request",
                              "One generation request (engine/request.h), validated when "
                              "submitted: token ids within the vocabulary, draft_len None (auto) "
                              "or in [0, max_draft_len], ...")
      .def(
          "__init__",
          [](GenerateRequest* self, std::vector<int32_t> prompt, int max_new_tokens,
             float temperature, int top_k, float top_p, uint64_t seed,
             std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings,
             std::vector<int32_t> prediction, std::string draft, std::optional<int> draft_len,
             int logprobs, float repetition_penalty, float frequency_penalty,
             float presence_penalty, std::map<int32_t, float> logit_bias) {
            new (self) GenerateRequest(
                make_request(std::move(prompt), max_new_tokens, temperature, top_k, top_p, seed,
                             std::move(stop_ids), std::move(stop_strings), std::move(prediction),
                             std::move(draft), draft_len, logprobs, repetition_penalty,
                             frequency_penalty, presence_penalty, std::move(logit_bias)));
          },
          REQUEST_ARGS)
      .def_rw("prompt", &GenerateRequest::prompt, "Token ids (a copy when read)")
      .def_rw("max_new_tokens", &GenerateRequest::max_new_tokens)
      .def_prop_rw(
          "temperature", [](const GenerateRequest& r) { return r.sampling.temperature; },
          [](GenerateRequest& r, float v) { r.sampling.temperature = v; }, "0: greedy")
      .def_prop_rw(
          "top_k", [](const GenerateRequest& r) { return r.sampling.top_k; },
          [](GenerateRequest& r, int v) { r.sampling.top_k = v; }, "0: off")
      .def_prop_rw(
          "top_p", [](const GenerateRequest& r) { return r.sampling.top_p; },
          [](GenerateRequest& r, float v) { r.sampling.top_p = v; }, "1: off")
      .def_prop_rw(
          "seed", [](const GenerateRequest& r) { return r.sampling.seed; },
          [](GenerateRequest& r, uint64_t v) { r.sampling.seed = v; })
      .def_prop_rw(
          "logprobs", [](const GenerateRequest& r) { return r.sampling.logprobs; },
          [](GenerateRequest& r, int v) { r.sampling.logprobs = v; },
          "-1: none; n >= 0: each token's log-probability and its top n candidates' (n <= 20)")
      .def_rw("repetition_penalty", &GenerateRequest::repetition_penalty, "> 0; 1: off")
      .def_rw("frequency_penalty", &GenerateRequest::frequency_penalty, "[-2, 2]; 0: off")
      .def_rw("presence_penalty", &GenerateRequest::presence_penalty, "[-2, 2]; 0: off")
      .def_rw("logit_bias", &GenerateRequest::logit_bias,
              "Token id -> bias in [-100, 100] added to its logit (a copy when read)")
      .def_prop_rw(
          "constraint",
          [](const GenerateRequest& r) -> nb::object {
            auto* ref = dynamic_cast<PyConstraintRef*>(r.constraint.get());
            return ref ? ref->obj : nb::none();
          },
          [](GenerateRequest& r, nb::object o) { r.constraint = constraint_ref(std::move(o)); },
          nb::arg("constraint").none(), "A TokenConstraint (structured output), or None")
      .def_rw("stop_ids", &GenerateRequest::stop_ids, "Generation ends after emitting one")
      .def_rw("stop_strings", &GenerateRequest::stop_strings, "... or once the text holds one")
      .def_rw("prediction", &GenerateRequest::prediction, "Predicted output (prompt lookup's)")
      .def_rw("draft", &GenerateRequest::draft, "Draft source: auto, model, lookup or none")
      .def_rw("draft_len", &GenerateRequest::draft_len,
              "Draft tokens per iteration, at most the engine's max_draft_len (0: no draft; "
              "None: auto, the controllers choose)");

  nb::class_<RequestStats>(m, "RequestStats",
                           "A finished request's counters and times (engine/scheduler.h)")
      .def_ro("draft", &RequestStats::draft, "The request's draft source")
      .def_ro("draft_len", &RequestStats::draft_len, "The request's draft_len (None: auto)")
      .def_ro("prompt_attention", &RequestStats::prompt_attention,
              "The products prompt rows attended with (f32, bf16 or int16)")
      .def_ro("prompt_tokens", &RequestStats::prompt_tokens)
      .def_ro("cached_tokens", &RequestStats::cached_tokens,
              "Prompt tokens the prompt cache held (not prefilled)")
      .def_ro("iterations", &RequestStats::iterations,
              "Decode iterations the request took part in (the prefill excluded)")
      .def_ro("spec_iterations", &RequestStats::spec_iterations,
              "... that verified draft tokens for it")
      .def_ro("drafted", &RequestStats::drafted, "Draft tokens verified")
      .def_ro("accepted", &RequestStats::accepted, "Draft tokens kept")
      .def_ro("emitted", &RequestStats::emitted,
              "Tokens emitted by iterations (not the prefill's first)")
      .def_prop_ro(
          "by_source",
          [](const RequestStats& s) {
            return by_source_name([&](int i) {
              return std::map<std::string, int>{{"iterations", s.iterations_by_source[i]},
                                                {"drafted", s.drafted_by_source[i]},
                                                {"accepted", s.accepted_by_source[i]}};
            });
          },
          "Per draft source: iterations, drafted, accepted")
      .def_ro("prediction_accepted", &RequestStats::prediction_accepted)
      .def_ro("prediction_rejected", &RequestStats::prediction_rejected)
      .def_ro("pruned", &RequestStats::pruned)
      .def_ro("forced", &RequestStats::forced)
      .def_ro("accepted_hist", &RequestStats::accepted_hist,
              "[max_draft_len + 1]: drafting iterations by accepted length")
      .def_prop_ro(
          "accepted_hist_by_source",
          [](const RequestStats& s) {
            return by_source_name([&](int i) { return s.accepted_hist_by_source[i]; });
          },
          "accepted_hist of each draft source's iterations")
      .def_ro("sources", &RequestStats::sources,
              "Per iteration: 'n' none, 'm' draft model, 'l' lookup")
      .def_ro("draft_model_skipped", &RequestStats::draft_model_skipped)
      .def_ro("queue_s", &RequestStats::queue_s, "Submission -> a KV slot")
      .def_ro("prefill_s", &RequestStats::prefill_s, "A KV slot -> the first token")
      .def_ro("draft_s", &RequestStats::draft_s)
      .def_ro("verify_s", &RequestStats::verify_s)
      .def_ro("catch_up_s", &RequestStats::catch_up_s)
      .def_ro("ttft_s", &RequestStats::ttft_s)
      .def_ro("total_s", &RequestStats::total_s)
      .def_ro("token_times", &RequestStats::token_times,
              "Seconds from submission at which each token became final");

  nb::class_<SchedulerEvent>(m, "Event", "What one scheduler step produced for one request")
      .def_ro("id", &SchedulerEvent::id, "The request's id (Scheduler.submit's)")
      .def_ro("tokens", &SchedulerEvent::tokens,
              "Tokens that became final (a final stop token included)")
      .def_prop_ro(
          "text", [](const SchedulerEvent& e) { return nb::bytes(e.text.data(), e.text.size()); },
          "Output text that became final: UTF-8 bytes, maybe cut mid-character")
      .def_prop_ro(
          "logprobs",
          [](const SchedulerEvent& e) {
            using Top = std::vector<std::pair<int32_t, float>>;
            std::vector<std::tuple<int32_t, float, Top>> out;
            for (const std::vector<TokenLogprob>& t : e.logprobs) {
              Top top;
              for (size_t i = 1; i < t.size(); ++i) top.emplace_back(t[i].id, t[i].logprob);
              out.emplace_back(t[0].id, t[0].logprob, std::move(top));
            }
            return out;
          },
          "Per token, where the request asks for them: (token, logprob, [(id, logprob) of the "
          "top candidates]); empty otherwise")
      .def_ro("finished", &SchedulerEvent::finished)
      .def_prop_ro(
          "reason",
          [](const SchedulerEvent& e) { return std::string(finish_reason_name(e.reason)); },
          "One of FINISH_REASONS once finished, else ''")
      .def_prop_ro(
          "stats",
          [](const SchedulerEvent& e) {
            return e.finished ? std::optional<RequestStats>(e.stats) : std::nullopt;
          },
          "The request's statistics once finished, else None");
}

}  // namespace trt_spec::bindings
