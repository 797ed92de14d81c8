// session_testing.cpp: Session of the test module (testing.cpp): an engine's Runtime and
// Scheduler opened by the test module itself (no objects cross from trt_spec._core), with the
// hooks tests and benchmarks need: events as the public module gives them, a request's slot and
// sequence state, KV caches, timed forwards and timed iterations; and, on a CPU backend with a
// scripted clock (scripted_backend.h, clock="host" or "graphs"), the costs it charges and the
// controllers' view of them.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>

#include "bindings/common.h"
#include "bindings/events.h"
#include "bindings/scripted_backend.h"
#include "common/errors.h"
#include "engine/runtime.h"
#include "engine/scheduler.h"
#include "spec/draft_model_proposer.h"
#include "spec/eagle3_proposer.h"
#include "spec/medusa_proposer.h"
#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_api.h"
#endif

// A CUDA backend switch of cuda_api.h as a Session method: its result, false on other backends.
// CUDA_INT_SWITCH: one taking and returning an int (-1 on other backends).
#ifdef TRT_SPEC_WITH_CUDA
#define CUDA_SWITCH(set) [](Session& s, bool on) { return set(s.rt->backend(), on); }
#define CUDA_INT_SWITCH(set) [](Session& s, int v) { return set(s.rt->backend(), v); }
#else
#define CUDA_SWITCH(set) [](Session&, bool) { return false; }
#define CUDA_INT_SWITCH(set) [](Session&, int) { return -1; }
#endif
namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;
using namespace trt_spec::bindings;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Session {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Scheduler> sch;
  trt_spec::testing::ScriptedBackend* scripted = nullptr;  // rt's backend, with clock=

  trt_spec::testing::ScriptedBackend& clock() {
    if (!scripted) throw InvalidArgument("this session has no scripted clock");
    return *scripted;
  }
  DraftModelProposer* model_proposer() const {
    return dynamic_cast<DraftModelProposer*>(sch->proposer(DraftSource::kModel));
  }
  DraftController& model_controller() const {
    if (!model_proposer()) throw InvalidArgument("this engine has no draft model");
    return model_proposer()->controller();
  }

  Model& model(const std::string& role) {
    Model* m = role == "target" ? &rt->target() : (role == "draft" ? rt->draft() : nullptr);
    if (!m) throw InvalidArgument("no model '" + role + "' in this engine");
    return *m;
  }
};

}  // namespace

void bind_session(nb::module_& m) {
  bind_scheduler_types(m);  // this module's own Request, Event and RequestStats
  nb::class_<Session>(m, "Session", "An engine's runtime and scheduler, for tests")
      .def(
          "__init__",
          [](Session* self, const std::string& path, const std::string& device, int n_threads,
             int prefill_chunk, int interleave_chunk, const std::vector<nb::bytes>& token_bytes,
             const std::string& clock, bool carry_prefill, int draft_window, int draft_read_chunk,
             bool prompt_cache) {
            RuntimeOptions o;
            o.device = device;
            o.n_threads = n_threads;
            o.prefill_chunk = prefill_chunk;
            SchedulerOptions so;
            so.prefill_chunk = prefill_chunk;
            so.interleave_chunk = interleave_chunk;
            so.carry_prefill = carry_prefill;
            so.draft_window = draft_window;
            so.draft_read_chunk = draft_read_chunk;
            so.prompt_cache = prompt_cache;
            for (const nb::bytes& b : token_bytes) so.token_bytes.emplace_back(b.c_str(), b.size());
            if (!clock.empty() && (device != "cpu" || (clock != "host" && clock != "graphs")))
              throw InvalidArgument("clock: 'host' or 'graphs', on the cpu device");
            nb::gil_scoped_release release;
            new (self) Session();
            std::unique_ptr<trt_spec::testing::ScriptedBackend> be;
            if (!clock.empty()) {
              be = std::make_unique<trt_spec::testing::ScriptedBackend>(n_threads,
                                                                        clock == "graphs");
              self->scripted = be.get();
            }
            self->rt = be ? std::make_unique<Runtime>(path, o, std::move(be))
                          : std::make_unique<Runtime>(path, o);
            if (self->scripted && self->rt->draft())
              self->scripted->set_draft_cache(self->rt->draft()->kv().k);
            self->sch = std::make_unique<Scheduler>(*self->rt, std::move(so));
          },
          "path"_a, "device"_a = "cpu", "n_threads"_a = 0, "prefill_chunk"_a = 256,
          "interleave_chunk"_a = 64, "token_bytes"_a = std::vector<nb::bytes>{}, "clock"_a = "",
          "carry_prefill"_a = true, "draft_window"_a = kDefaultDraftWindow,
          "draft_read_chunk"_a = kDefaultDraftReadChunk, "prompt_cache"_a = true,
          "clock: '' (the device's own), or a CPU backend with a scripted clock, 'host' "
          "(synchronous, like the CPU) or 'graphs' (asynchronous with graphs, like a GPU); "
          "carry_prefill, draft_window, draft_read_chunk, prompt_cache: SchedulerOptions'")
      .def(
          "script_costs",
          [](Session& s, double target_fixed, double target_row, double draft_fixed,
             double draft_row, double capture, double first_launch) {
            s.clock().set_costs(trt_spec::testing::ScriptedCosts{
                target_fixed, target_row, draft_fixed, draft_row, capture, first_launch});
          },
          "target_fixed"_a, "target_row"_a, "draft_fixed"_a, "draft_row"_a, "capture"_a = 0.0,
          "first_launch"_a = 0.0,
          "The scripted clock's costs: a forward of n rows costs fixed + row * n seconds; a "
          "capture and a graph's first launch (graphs) their own")
      .def_prop_ro("clock_s", [](Session& s) { return s.clock().clock(); })
      .def_prop_ro(
          "device_syncs", [](Session& s) { return s.clock().syncs(); },
          "Synchronisations so far (download and synchronize calls)")
      .def_prop_ro("captures", [](Session& s) { return s.clock().captures(); })
      .def(
          "verify_time",
          [](Session& s, int B, int rows) { return s.model_controller().verify_time(B, rows); },
          "batch"_a, "rows"_a, "The draft model controller's verify pass of rows per sequence")
      .def(
          "draft_kv",
          [](Session& s, int slot, int layer, int n) {
            // K then V rows [0, n) of every kv head of one slot and layer of the draft's cache.
            Model* d = s.rt->draft();
            if (!d) throw InvalidArgument("the engine has no draft model");
            const KvCache& kv = d->kv();
            if (slot < 0 || slot >= kv.slots || layer < 0 || layer >= kv.layers || n < 0 ||
                n > kv.max_seq)
              throw InvalidArgument("draft_kv: bad slot, layer or length");
            const size_t row = static_cast<size_t>(kv.head_dim) * kv.elem_bytes();
            std::string out(2 * kv.kv_heads * n * row, '\0');
            char* o = out.data();
            for (const void* base : {kv.k, kv.v})
              for (int h = 0; h < kv.kv_heads; ++h, o += n * row) {
                const size_t el = kv.slot_layer_offset(slot, layer) +
                                  static_cast<size_t>(h) * kv.max_seq * kv.head_dim;
                s.rt->backend().download(o, static_cast<const char*>(base) + el * kv.elem_bytes(),
                                         n * row);
              }
            return nb::bytes(out.data(), out.size());
          },
          "slot"_a, "layer"_a, "n"_a,
          "The draft's cache entries [0, n) of a slot and layer (K then V, per kv head; raw "
          "elements of its kv type)")
      .def_prop_ro("draft_prompt_rows",
                   [](Session& s) {
                     const DraftModelProposer* p = s.model_proposer();
                     return p ? p->prompt_rows_read() : int64_t{0};
                   })
      .def_prop_ro("read_per_row", [](Session& s) { return s.model_controller().read_per_row(); })
      .def_prop_ro("catch_up_per_token",
                   [](Session& s) { return s.model_controller().catch_up_per_token(); })
      .def_prop_ro("last_warm_up", [](Session& s) { return s.sch->iteration().warm_up(); })
      .def_prop_ro("max_batch", [](Session& s) { return s.rt->max_batch(); })
      .def_prop_ro("max_seq_len", [](Session& s) { return s.rt->max_seq_len(); })
      .def_prop_ro("max_draft_len", [](Session& s) { return s.rt->max_draft_len(); })
      .def_prop_ro("vocab_size", [](Session& s) { return s.rt->vocab_size(); })
      .def(
          "submit", [](Session& s, const GenerateRequest& r) { return s.sch->submit(r); },
          "request"_a)
      .def(
          "submit",
          [](Session& s, std::vector<int32_t> prompt, int max_new_tokens, float temperature,
             int top_k, float top_p, uint64_t seed, std::vector<int32_t> stop_ids,
             std::vector<std::string> stop_strings, std::vector<int32_t> prediction,
             std::string draft, std::optional<int> draft_len, int logprobs, float repetition,
             float frequency, float presence, std::map<int32_t, float> logit_bias) {
            return s.sch->submit(make_request(std::move(prompt), max_new_tokens, temperature, top_k,
                                              top_p, seed, std::move(stop_ids),
                                              std::move(stop_strings), std::move(prediction),
                                              std::move(draft), draft_len, logprobs, repetition,
                                              frequency, presence, std::move(logit_bias)));
          },
          REQUEST_ARGS, "submit(Request(...)) in one call")
      .def(
          "cancel", [](Session& s, uint64_t id) { s.sch->cancel(id); }, "id"_a)
      .def(
          "step",
          [](Session& s) {
            nb::gil_scoped_release release;
            return s.sch->step();
          },
          "One scheduling step: a list of Event")
      .def_prop_ro("has_work", [](Session& s) { return s.sch->has_work(); })
      .def_prop_ro("last_batch", [](Session& s) { return s.sch->last_batch(); })
      .def_prop_ro("last_k", [](Session& s) { return s.sch->last_k(); })
      .def_prop_ro("iterations", [](Session& s) { return s.sch->iterations(); })
      .def_prop_ro("last_source",
                   [](Session& s) { return draft_source_name(s.sch->last_source()); })
      .def_prop_ro("last_prefill_rows", [](Session& s) { return s.sch->last_prefill_rows(); })
      .def_prop_ro(
          "last_verify_rows", [](Session& s) { return s.sch->iteration().last_rows(); },
          "Verify rows the last iteration's target pass computed (carried rows not counted)")
      .def_prop_ro("prefill_row_s", [](Session& s) { return s.sch->pacer().per_row(); })
      .def_prop_ro("pacer_decode_s", [](Session& s) { return s.sch->pacer().decode_seconds(); })
      .def_prop_ro("carried_row_s", [](Session& s) { return s.sch->pacer().carried_row(); })
      .def_prop_ro("last_draft_s", [](Session& s) { return s.sch->last_times().draft_s; })
      .def_prop_ro("last_verify_s", [](Session& s) { return s.sch->last_times().verify_s; })
      .def_prop_rw(
          "use_graphs", [](Session& s) { return s.sch->iteration().use_graphs(); },
          [](Session& s, bool on) { s.sch->iteration().set_use_graphs(on); })
      .def_prop_rw(
          "skip_padding", [](Session& s) { return s.sch->iteration().skip_padding(); },
          [](Session& s, bool on) { s.sch->iteration().set_skip_padding(on); })
      .def("set_cuda_pdl", CUDA_SWITCH(cuda_set_pdl), "on"_a,
           "CUDA: launch the matmuls as programmatic dependents from now on (sm_90+; "
           "cuda_backend.h). Returns whether they are; false on other backends.")
      .def("set_cuda_one_wave", CUDA_SWITCH(cuda_set_one_wave), "on"_a,
           "CUDA: plan decode and verify launches in one wave from now on (the default), or the "
           "earlier grids (off). Returns false on other backends.")
      .def("set_cuda_persistent", CUDA_SWITCH(cuda_set_persistent), "on"_a,
           "CUDA: run each model forward of at most 16 rows as one persistent launch from now on "
           "(sm_90+; graphs captured before keep theirs). Returns whether it does.")
      .def("set_cuda_attention_warps", CUDA_INT_SWITCH(cuda_set_attention_warps), "warps"_a,
           "CUDA: warps per attention block from now on, 4 (the default) or 8. Returns the value "
           "in force; -1 on other backends.")
      .def("set_cuda_attention_one_row", CUDA_SWITCH(cuda_set_attention_one_row), "on"_a,
           "CUDA: run one-row attention launches without tree bits on the decode instance from "
           "now on (the same bits). Returns whether they do; false on other backends.")
      .def("set_cuda_repeat_attention", CUDA_INT_SWITCH(cuda_set_repeat_attention), "times"_a,
           "CUDA: issue each attention launch `times` times in a row from now on (a measurement "
           "aid: the same bits). Returns the value in force; -1 on other backends.")
      .def("set_cuda_repeat_qkv", CUDA_INT_SWITCH(cuda_set_repeat_qkv), "times"_a,
           "CUDA: issue each qkv projection `times` times in a row from now on (a measurement "
           "aid: the same bits). Returns the value in force; -1 on other backends.")
      .def("set_cuda_prefetch_next", CUDA_INT_SWITCH(cuda_set_prefetch_next), "bytes"_a,
           "CUDA: bytes (at most) of the next ops' weights each launch of the graphs captured "
           "from now on streams toward L2 (0: none). Returns the value in force; -1 on other "
           "backends.")
      .def("set_cuda_prefetch", CUDA_INT_SWITCH(cuda_set_prefetch), "bytes"_a,
           "CUDA: bytes of its weights (at most) each matmul block streams toward L2 ahead of its "
           "use from now on (0: none). Returns the value in force; -1 on other backends.")
      .def("set_cuda_imma_rows", CUDA_INT_SWITCH(cuda_set_imma_rows), "rows"_a,
           "CUDA: the fewest rows of a q8 / q4 matmul that run the tensor-core kernel from now on "
           "(0: the default, prefill tiles only). Returns the value in force; -1 on other "
           "backends.")
      .def_prop_ro("graphs_captured",
                   [](Session& s) { return s.sch->iteration().graphs_captured(); })
      .def(
          "slot_of", [](Session& s, uint64_t id) { return s.sch->slot_of(id); }, "id"_a)
      .def(
          "seq_state",
          [](Session& s, uint64_t id) {
            const SeqState* st = s.sch->seq_state(id);
            if (!st) throw InvalidArgument("no running request with that id");
            std::vector<int32_t> v(sizeof(SeqState) / 4);
            std::memcpy(v.data(), st, sizeof(SeqState));
            return v;
          },
          "id"_a, "The request's SeqState as int32 words (while it holds a slot)")
      .def(
          "slot_state",
          [](Session& s, int slot) {
            // The SeqState in backend memory (after a request finished: its last state).
            if (slot < 0 || slot >= s.rt->max_batch()) throw InvalidArgument("bad slot");
            std::vector<SeqState> all;
            s.sch->iteration().read_states(all);
            std::vector<int32_t> v(sizeof(SeqState) / 4);
            std::memcpy(v.data(), &all[slot], sizeof(SeqState));
            return v;
          },
          "slot"_a, "A slot's SeqState as int32 words, read from backend memory")
      .def(
          "history",
          [](Session& s, int slot, int n) {
            const SpecState& st = s.sch->iteration().state();
            if (slot < 0 || slot >= s.rt->max_batch() || n < 0 || n > st.max_seq)
              throw InvalidArgument("history: bad slot or length");
            std::vector<int32_t> h(n);
            s.rt->backend().download(h.data(), st.history + static_cast<size_t>(slot) * st.max_seq,
                                     n * 4);
            return h;
          },
          "slot"_a, "n"_a, "Tokens at positions [0, n) of a slot's history (backend memory)")
      .def(
          "predicted_time",
          [](Session& s, const std::string& source, int B, int k) {
            for (int i = 1; i < kDraftSourceCount; ++i) {
              const Proposer* p = s.sch->proposer(static_cast<DraftSource>(i));
              if (p && source == draft_source_name(p->source())) return p->predicted_time(B, k);
            }
            throw InvalidArgument("no controller for '" + source + "'");
          },
          "source"_a, "batch"_a, "k"_a, "A controller's model of an iteration's seconds")
      .def(
          "kv_cache",
          [](Session& s, const std::string& role, int slot, int n) {
            // k and v [layers, kv_heads, n, head_dim] of positions [0, n) of one slot, as f32
            // (an f16 / bf16 cache's values decoded exactly).
            const KvCache& kv = s.model(role).kv();
            if (slot < 0 || slot >= kv.slots || n < 0 || n > kv.max_seq)
              throw InvalidArgument("kv_cache: slot or length out of range");
            const size_t row = static_cast<size_t>(n) * kv.head_dim, eb = kv.elem_bytes();
            std::vector<float> k(static_cast<size_t>(kv.layers) * kv.kv_heads * row), v(k.size());
            std::vector<uint8_t> kb(k.size() * eb), vb(k.size() * eb);
            for (int l = 0; l < kv.layers; ++l)
              for (int h = 0; h < kv.kv_heads; ++h) {
                const size_t src = kv.slot_layer_offset(slot, l) +
                                   static_cast<size_t>(h) * kv.max_seq * kv.head_dim;
                const size_t dst = (static_cast<size_t>(l) * kv.kv_heads + h) * row;
                s.rt->backend().download(kb.data() + dst * eb,
                                         static_cast<const uint8_t*>(kv.k) + src * eb, row * eb);
                s.rt->backend().download(vb.data() + dst * eb,
                                         static_cast<const uint8_t*>(kv.v) + src * eb, row * eb);
              }
            for (size_t i = 0; i < k.size(); ++i) {
              k[i] = kv_load_f32(kb.data(), kv.type, i);
              v[i] = kv_load_f32(vb.data(), kv.type, i);
            }
            std::initializer_list<size_t> shape = {
                static_cast<size_t>(kv.layers), static_cast<size_t>(kv.kv_heads),
                static_cast<size_t>(n), static_cast<size_t>(kv.head_dim)};
            return std::make_pair(owned_array<float>(std::move(k), shape),
                                  owned_array<float>(std::move(v), shape));
          },
          "role"_a, "slot"_a, "n"_a, "(k, v) [layers, kv_heads, n, head_dim] of one KV slot")
      .def(
          "prompt_logits",
          [](Session& s, const std::string& role, const std::vector<int32_t>& tokens) {
            const int V = s.model(role).config().vocab_size;
            std::vector<float> out;
            {
              nb::gil_scoped_release release;
              out = s.rt->prompt_logits(tokens, 0, role == "draft");
            }
            return owned_array<float>(std::move(out), {tokens.size(), static_cast<size_t>(V)});
          },
          "role"_a, "tokens"_a,
          "A model's logits [n, its vocab] at every position of a prompt run in KV slot 0")
      .def(
          "medusa_head_logits",
          [](Session& s, HostArray<float, 2> hidden) {
            auto* p = dynamic_cast<MedusaProposer*>(s.sch->proposer(DraftSource::kModel));
            if (!p) throw InvalidArgument("this engine has no Medusa heads");
            const int n = static_cast<int>(hidden.shape(0));
            std::vector<float> h(hidden.data(), hidden.data() + hidden.size()), out;
            {
              nb::gil_scoped_release release;
              out = p->head_logits(h, n);
            }
            const size_t V = out.size() / (static_cast<size_t>(p->heads()) * n);
            return owned_array<float>(std::move(out),
                                      {static_cast<size_t>(p->heads()), static_cast<size_t>(n), V});
          },
          "hidden"_a, "The Medusa heads' logits [heads, n, vocab] of hidden states [n, dim]")
      .def(
          "eagle3_logits",
          [](Session& s, const std::vector<int32_t>& tokens, int32_t next) {
            auto* p = dynamic_cast<Eagle3Proposer*>(s.sch->proposer(DraftSource::kModel));
            if (!p) throw InvalidArgument("this engine has no EAGLE-3 head");
            check_token_ids(tokens, s.rt->target().config().vocab_size, "tokens");
            std::vector<float> out;
            {
              nb::gil_scoped_release release;
              out = p->prompt_logits(tokens, next);
            }
            return owned_array<float>(std::move(out),
                                      {tokens.size(), static_cast<size_t>(p->draft_vocab())});
          },
          "tokens"_a, "next"_a,
          "The EAGLE-3 head's logits [n, draft_vocab] over a prompt run in KV slot 0, row p "
          "reading the token at p + 1 (next after the last)")
      .def(
          "hidden_states",
          [](Session& s, const std::vector<int32_t>& tokens) {
            // The target's final normed hidden states [n, dim] of a prompt run in KV slot 0.
            Runtime& rt = *s.rt;
            Model& m = rt.target();
            const int n = static_cast<int>(tokens.size()), D = m.config().dim;
            if (n < 1 || n > m.limits().max_rows)
              throw InvalidArgument("hidden_states: 1 to max_rows tokens");
            check_token_ids(tokens, m.config().vocab_size, "tokens");
            std::vector<float> out(static_cast<size_t>(n) * D);
            {
              nb::gil_scoped_release release;
              Backend& be = rt.backend();
              std::vector<int32_t> pos(n), rows(n), slot(n, 0);
              std::iota(pos.begin(), pos.end(), 0);
              std::iota(rows.begin(), rows.end(), 0);
              BackendBuffer tb(be, n * 4), pb(be, n * 4), sb(be, n * 4), rb(be, n * 4);
              BackendBuffer lg(be, static_cast<size_t>(n) * m.config().vocab_size * 4);
              BackendBuffer hd(be, out.size() * 4);
              be.upload(tb.as<void>(), tokens.data(), n * 4);
              be.upload(pb.as<void>(), pos.data(), n * 4);
              be.upload(sb.as<void>(), slot.data(), n * 4);
              be.upload(rb.as<void>(), rows.data(), n * 4);
              Rows r{tb.as<int32_t>(), pb.as<int32_t>(), sb.as<int32_t>()};
              m.forward(r, n, rb.as<int32_t>(), n, lg.as<float>(), hd.as<float>());
              be.download(out.data(), hd.as<void>(), out.size() * 4);
              be.synchronize();
            }
            return owned_array<float>(std::move(out),
                                      {static_cast<size_t>(n), static_cast<size_t>(D)});
          },
          "tokens"_a,
          "The target's final normed hidden states [n, dim] of a prompt run in KV slot 0 (its "
          "decode-row bits)")
      .def(
          "time_forward",
          [](Session& s, const std::string& role, int rows, int n_logits, int context, int iters,
             bool graph, bool prompt) {
            Model& mdl = s.model(role);
            Runtime& rt = *s.rt;
            if (rows < 1 || rows > mdl.limits().max_rows || n_logits < 0 || n_logits > rows ||
                context < 0 || context + rows > rt.max_seq_len() || iters < 1)
              throw InvalidArgument("time_forward: rows, context or iters out of range");
            nb::gil_scoped_release release;
            Backend& be = rt.backend();
            const int V = mdl.config().vocab_size;
            std::vector<int32_t> tok(rows), pos(rows), slot(rows, 0), lr(rows);
            for (int i = 0; i < rows; ++i) tok[i] = (i * 7919 + 13) % V;
            std::iota(pos.begin(), pos.end(), context);
            std::iota(lr.begin(), lr.end(), 0);
            BackendBuffer tb(be, rows * 4), pb(be, rows * 4), sb(be, rows * 4), lb(be, rows * 4);
            BackendBuffer logits(be, static_cast<size_t>(std::max(n_logits, 1)) * V * 4);
            be.upload(tb.as<void>(), tok.data(), rows * 4);
            be.upload(pb.as<void>(), pos.data(), rows * 4);
            be.upload(sb.as<void>(), slot.data(), rows * 4);
            be.upload(lb.as<void>(), lr.data(), rows * 4);
            auto issue = [&] {
              Rows r{tb.as<int32_t>(), pb.as<int32_t>(), sb.as<int32_t>()};
              if (prompt) r.prompt_from = 0;
              mdl.forward(r, rows, lb.as<int32_t>(), n_logits, logits.as<float>());
            };
            std::unique_ptr<BackendGraph> g = graph ? be.capture(issue) : nullptr;
            auto once = [&] { g ? g->launch() : issue(); };
            once();
            be.synchronize();
            const double t0 = now_s();
            for (int i = 0; i < iters; ++i) once();
            be.synchronize();
            return (now_s() - t0) / iters;
          },
          "role"_a, "rows"_a, "n_logits"_a, "context"_a, "iters"_a, "graph"_a = true,
          "prompt"_a = false,
          "Seconds per forward of `rows` rows at positions context.. of KV slot 0 (overwritten); "
          "prompt: the rows read a prompt (Rows::prompt_from), as a prefill chunk's do")
      .def(
          "time_iterations",
          [](Session& s, const std::string& source, int k, int iters) {
            // Runs the iteration program on the sequences of the scheduler's last iteration
            // (their state advances; the scheduler's host bookkeeping does not). Stops before any
            // could run out of positions.
            Runtime& rt = *s.rt;
            const int B = s.sch->last_batch();
            DraftSource src = DraftSource::kNone;
            if (source == "model")
              src = DraftSource::kModel;
            else if (source == "lookup")
              src = DraftSource::kLookup;
            else if (source != "none")
              throw InvalidArgument("source: none, model or lookup");
            if (k < 0 || k > rt.max_draft_len() || B < 1 || (src == DraftSource::kNone) != (k == 0))
              throw InvalidArgument("time_iterations: bad source or k, or no iteration yet");
            nb::gil_scoped_release release;
            Iteration& it = s.sch->iteration();
            std::vector<SeqState> seqs;
            it.read_states(seqs);
            auto room = [&] {
              for (const SeqState& q : seqs)
                if (q.n_past > 0 && q.n_past + k + 1 >= rt.max_seq_len()) return false;
              return true;
            };
            it.capture(src, k);
            int done = 0;
            const double t0 = now_s();
            while (done < iters && room()) {
              it.run(src, k);
              it.read_states(seqs);
              ++done;
            }
            const double dt = now_s() - t0;
            return std::make_tuple(done ? dt / done : 0.0, done);
          },
          "source"_a, "k"_a, "iters"_a,
          "(seconds per iteration, iterations run) of the last iteration's sequences");
}
