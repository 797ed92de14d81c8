// core.cpp: the nanobind module trt_spec._core, the only bridge between Python and C++.
//
// Exposes the engine schema constants and weight formats (defined once in C++; the Python
// builder reads them from here), the quantizers and CPU kernels (for the builder and the
// kernel tests), sampling primitives, and the Runtime / Decoder objects. Runtime errors map
// to Python exceptions: EngineFileError (a ValueError subclass), ValueError, RuntimeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/philox.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/decoder.h"
#include "format/engine_file.h"
#include "common/errors.h"
#include "engine/runtime.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;

void bind_ops_testing(nb::module_& m);  // ops_testing.cpp

namespace {

using U8Array = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F32Matrix = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using F32Vector = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

void check_blob(const U8Array& blob, WeightType t, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) throw InvalidArgument("rows and cols must be positive");
  if (weight_type_needs_groups(t) && cols % kQ4SuperBlock != 0)
    throw InvalidArgument("q8/q4 need cols to be a multiple of 64");
  if (blob.shape(0) != weight_blob_bytes(t, rows, cols))
    throw InvalidArgument("blob has " + std::to_string(blob.shape(0)) + " bytes, expected " +
                          std::to_string(weight_blob_bytes(t, rows, cols)));
}

// A 64-byte aligned copy of a blob (kernels assume aligned sections).
std::shared_ptr<uint8_t> aligned_copy(const U8Array& blob) {
  size_t n = align_up(blob.shape(0), 64);
  std::shared_ptr<uint8_t> p(static_cast<uint8_t*>(std::aligned_alloc(64, n)), std::free);
  std::memcpy(p.get(), blob.data(), blob.shape(0));
  return p;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "trt-spec native core: engine format, kernels and runtime";

  static nb::exception<EngineFileError> engine_file_error(m, "EngineFileError", PyExc_ValueError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  // ---- engine schema -------------------------------------------------------------------
  m.attr("ENGINE_MAGIC") = nb::bytes(kEngineMagic, 8);
  m.attr("ENGINE_FORMAT_VERSION") = kEngineFormatVersion;
  m.attr("ENGINE_HEADER_BYTES") = kEngineHeaderBytes;
  m.attr("DATA_ALIGN") = kDataAlign;
  m.attr("SECTION_ALIGN") = kSectionAlign;
  m.attr("QUANT_GROUP") = kQuantGroup;
  m.attr("Q4_SUPER_BLOCK") = kQ4SuperBlock;
  m.attr("MAX_DRAFT_LEN") = kMaxDraftLen;

  nb::enum_<WeightType>(m, "WeightType", "Weight storage types (kernels/weight_format.h)")
      .value("F32", WeightType::F32)
      .value("F16", WeightType::F16)
      .value("BF16", WeightType::BF16)
      .value("Q8", WeightType::Q8)
      .value("Q4", WeightType::Q4);
  m.def("weight_type_name", &weight_type_name, "t"_a, "Name used in engine metadata");
  m.def("weight_type_from_name", &weight_type_from_name, "name"_a);
  m.def("weight_blob_bytes", &weight_blob_bytes, "t"_a, "rows"_a, "cols"_a,
        "Bytes of a [rows, cols] tensor of type t in an engine file");

  m.def(
      "checksum64",
      [](U8Array data) {
        nb::gil_scoped_release release;
        return checksum64(data.data(), data.shape(0));
      },
      "data"_a, "The engine file's 64-bit checksum of a uint8 array");

  // ---- quantizers and CPU kernels --------------------------------------------------------
  m.def(
      "quantize_weight",
      [](F32Matrix w, WeightType t) {
        const int64_t rows = w.shape(0), cols = w.shape(1);
        if (weight_type_needs_groups(t) && cols % kQ4SuperBlock != 0)
          throw InvalidArgument("q8/q4 need cols to be a multiple of 64, got " +
                                std::to_string(cols));
        std::vector<uint8_t> blob(weight_blob_bytes(t, rows, cols));
        {
          nb::gil_scoped_release release;
          cpu::quantize_weight(w.data(), rows, cols, t, blob.data());
        }
        size_t n = blob.size();
        return owned_array<uint8_t>(std::move(blob), {n});
      },
      "w"_a, "t"_a, "Encode a float32 [rows, cols] matrix as an engine blob (uint8)");
  m.def(
      "dequantize_weight",
      [](U8Array blob, WeightType t, int64_t rows, int64_t cols) {
        check_blob(blob, t, rows, cols);
        auto aligned = aligned_copy(blob);
        std::vector<float> out(static_cast<size_t>(rows) * cols);
        {
          nb::gil_scoped_release release;
          cpu::dequantize_weight(WeightView{t, rows, cols, aligned.get()}, out.data());
        }
        return owned_array<float>(std::move(out),
                                  {static_cast<size_t>(rows), static_cast<size_t>(cols)});
      },
      "blob"_a, "t"_a, "rows"_a, "cols"_a, "Reference decode of a blob to float32 [rows, cols]");
  m.def("cpu_isas", &cpu::supported_isas, "Instruction sets this CPU runs kernels for");
  m.def(
      "cpu_matmul",
      [](U8Array blob, WeightType t, int64_t rows, int64_t cols, F32Matrix x,
         const std::string& isa, int64_t r0, int64_t r1) {
        check_blob(blob, t, rows, cols);
        if (static_cast<int64_t>(x.shape(1)) != cols)
          throw InvalidArgument("x must have cols columns");
        const cpu::MatmulKernels* k = cpu::matmul_kernels_for(isa.c_str());
        if (!k) throw InvalidArgument("this CPU cannot run ISA '" + isa + "'");
        if (r1 < 0) r1 = rows;
        if (r0 < 0 || r0 > r1 || r1 > rows) throw InvalidArgument("bad row range");
        const int M = static_cast<int>(x.shape(0));
        auto aligned = aligned_copy(blob);
        WeightView w{t, rows, cols, aligned.get()};
        std::vector<float> y(static_cast<size_t>(M) * rows, 0.0f);
        {
          nb::gil_scoped_release release;
          if (weight_type_needs_groups(t)) {
            std::shared_ptr<void> buf(
                std::aligned_alloc(64, align_up(cpu::quant_acts_bytes(M, cols), 64)), std::free);
            cpu::QuantActs qa = cpu::quant_acts_view(buf.get(), M, static_cast<int>(cols));
            k->quantize_acts(x.data(), 0, M, qa);
            k->matmul_quant(w, qa, M, y.data(), rows, r0, r1);
          } else {
            k->matmul_float(w, x.data(), M, y.data(), rows, r0, r1);
          }
        }
        return owned_array<float>(std::move(y),
                                  {static_cast<size_t>(M), static_cast<size_t>(rows)});
      },
      "blob"_a, "t"_a, "rows"_a, "cols"_a, "x"_a, "isa"_a, "r0"_a = 0, "r1"_a = -1,
      "y [M, rows] = x @ W^T with one ISA's kernel (rows outside [r0, r1) stay 0)");

  // ---- sampling ---------------------------------------------------------------------------
  m.def("philox_uniform", &philox_uniform, "seed"_a, "step"_a, "lane"_a, "stream"_a,
        "The uniform number in [0, 1) every backend draws for (seed, step, lane, stream)");
  m.def(
      "sample_row",
      [](F32Vector logits, float temperature, int top_k, float top_p, uint64_t seed, uint64_t step,
         uint32_t lane) {
        SamplingParams p{temperature, top_k, top_p, seed};
        validate_sampling(p);
        return sample_row(logits.data(), static_cast<int>(logits.shape(0)), p, step, lane);
      },
      "logits"_a, "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a, "step"_a, "lane"_a = 0,
      "Draw one token from a logits row by the rule of kernels/sampling.h");

  // ---- devices ----------------------------------------------------------------------------
  m.def("cuda_compiled", &cuda_compiled, "Whether this build has the CUDA backend");
  m.def("cuda_available", &cuda_available,
        "Whether this build has the CUDA backend and a usable GPU is present");

  // ---- runtime ----------------------------------------------------------------------------
  nb::class_<Runtime>(m, "Runtime", "An opened engine file with its backend and target model")
      .def(
          "__init__",
          [](Runtime* self, const std::string& path, const std::string& device, int n_threads,
             bool verify, int prefill_chunk) {
            RuntimeOptions o;
            o.device = device;
            o.n_threads = n_threads;
            o.verify_checksums = verify;
            o.prefill_chunk = prefill_chunk;
            nb::gil_scoped_release release;
            new (self) Runtime(path, o);
          },
          "path"_a, "device"_a = "cpu", "n_threads"_a = 0, "verify"_a = true,
          "prefill_chunk"_a = 256)
      .def_prop_ro("metadata_json", [](Runtime& r) { return r.file().json_text(); })
      .def_prop_ro("max_seq_len", &Runtime::max_seq_len)
      .def_prop_ro("max_batch", &Runtime::max_batch)
      .def_prop_ro("vocab_size", &Runtime::vocab_size)
      .def_prop_ro("backend_name", [](Runtime& r) { return r.backend().name(); })
      .def_prop_ro("threads", [](Runtime& r) { return r.backend().threads(); })
      .def_prop_ro("draft_len", &Runtime::draft_len)
      .def_prop_ro("weight_bytes",
                   [](Runtime& r) {
                     return r.target().weight_bytes() + (r.draft() ? r.draft()->weight_bytes() : 0);
                   })
      .def_prop_ro("kv_bytes",
                   [](Runtime& r) {
                     return r.target().kv_bytes() + (r.draft() ? r.draft()->kv_bytes() : 0);
                   })
      .def(
          "kv_cache",
          [](Runtime& r, const std::string& role, int slot, int n) {
            // k and v [layers, kv_heads, n, head_dim] of positions [0, n) of one slot.
            Model* m = role == "target" ? &r.target() : (role == "draft" ? r.draft() : nullptr);
            if (!m) throw InvalidArgument("no model '" + role + "' in this engine");
            const KvCache& kv = m->kv();
            if (slot < 0 || slot >= kv.slots || n < 0 || n > kv.max_seq)
              throw InvalidArgument("kv_cache: slot or length out of range");
            const size_t row = static_cast<size_t>(n) * kv.head_dim;
            std::vector<float> k(static_cast<size_t>(kv.layers) * kv.kv_heads * row), v(k.size());
            for (int l = 0; l < kv.layers; ++l)
              for (int h = 0; h < kv.kv_heads; ++h) {
                const size_t src = kv.slot_layer_offset(slot, l) +
                                   static_cast<size_t>(h) * kv.max_seq * kv.head_dim;
                const size_t dst = (static_cast<size_t>(l) * kv.kv_heads + h) * row;
                r.backend().download(k.data() + dst, kv.k + src, row * 4);
                r.backend().download(v.data() + dst, kv.v + src, row * 4);
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
          [](Runtime& r, const std::vector<int32_t>& tokens) {
            std::vector<float> out;
            {
              nb::gil_scoped_release release;
              out = r.prompt_logits(tokens);
            }
            size_t V = static_cast<size_t>(r.vocab_size());
            return owned_array<float>(std::move(out), {tokens.size(), V});
          },
          "tokens"_a, "Logits [n, vocab] of every position of a prompt (target model)");

  nb::class_<Decoder>(m, "Decoder",
                      "The token loop of up to max_batch requests: prefill, then speculative "
                      "iterations of all running sequences together (runtime/decoder.h)")
      .def(nb::init<Runtime&>(), "runtime"_a, nb::keep_alive<1, 2>())
      .def(
          "add",
          [](Decoder& d, const std::vector<int32_t>& prompt, int max_new_tokens, float temperature,
             int top_k, float top_p, uint64_t seed, const std::vector<int32_t>& stop_ids) {
            GenerateRequest req;
            req.prompt = prompt;
            req.max_new_tokens = max_new_tokens;
            req.sampling = SamplingParams{temperature, top_k, top_p, seed};
            req.stop_ids = stop_ids;
            return d.add(req);
          },
          "prompt"_a, "max_new_tokens"_a, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "seed"_a = 0, "stop_ids"_a = std::vector<int32_t>{},
          "Validates a request and gives it a free KV slot (returned); it is prefilled by the "
          "next step()")
      .def_prop_rw("draft_len", &Decoder::draft_len, &Decoder::set_draft_len,
                   "-1: auto (chosen per iteration), 0: target-only, k: k draft tokens")
      .def(
          "step",
          [](Decoder& d) {
            std::vector<Decoder::Event> ev;
            {
              nb::gil_scoped_release release;
              ev = d.step();
            }
            std::vector<std::pair<int, std::vector<int32_t>>> out;
            for (auto& e : ev) out.emplace_back(e.slot, std::move(e.tokens));
            return out;
          },
          "Prefills new requests or runs one iteration; [(slot, tokens that became final)]")
      .def("cancel", &Decoder::cancel, "slot"_a, "End a sequence now and free its slot")
      .def_prop_ro("running", &Decoder::running)
      .def("done", &Decoder::done, "slot"_a)
      .def(
          "stop_reason", [](Decoder& d, int slot) { return stop_reason_name(d.stop_reason(slot)); },
          "slot"_a)
      .def("generated", &Decoder::generated, "slot"_a)
      .def("context_len", &Decoder::context_len, "slot"_a)
      .def("acceptance_estimate", &Decoder::acceptance_estimate, "slot"_a)
      .def(
          "stats",
          [](Decoder& d, int slot) {
            const RequestStats& s = d.stats(slot);
            nb::dict r;
            r["iterations"] = s.iterations;
            r["spec_iterations"] = s.spec_iterations;
            r["drafted"] = s.drafted;
            r["accepted"] = s.accepted;
            r["emitted"] = s.emitted;
            r["accepted_hist"] = s.accepted_hist;
            r["prefill_s"] = s.prefill_s;
            r["draft_s"] = s.draft_s;
            r["verify_s"] = s.verify_s;
            r["catch_up_s"] = s.catch_up_s;
            return r;
          },
          "slot"_a, "The request's counters (valid until the slot is reused)")
      .def_prop_ro("last_batch", &Decoder::last_batch)
      .def_prop_ro("last_k", &Decoder::last_k)
      .def_prop_ro("last_draft_s", [](Decoder& d) { return d.last_times().draft_s; })
      .def_prop_ro("last_verify_s", [](Decoder& d) { return d.last_times().verify_s; })
      .def(
          "predicted_time",
          [](Decoder& d, int B, int k) { return d.controller().predicted_time(B, k); }, "batch"_a,
          "k"_a, "The auto controller's model of an iteration's seconds (-1: not measured)")
      .def_prop_rw(
          "use_graphs", [](Decoder& d) { return d.program().use_graphs(); },
          [](Decoder& d, bool on) { d.program().set_use_graphs(on); },
          "Replay each iteration as one captured graph where the backend has graphs (CUDA; "
          "default); False launches the same ops one by one")
      .def_prop_ro(
          "graphs_captured", [](Decoder& d) { return d.program().graphs_captured(); },
          "Iteration graphs captured so far (one per batch size and draft length used)");

  nb::class_<DraftController>(m, "DraftController",
                              "The cost model behind draft_len='auto' (runtime/draft_controller.h)")
      .def(nb::init<int, int>(), "max_batch"_a, "max_k"_a)
      .def("choose", &DraftController::choose, "batch"_a, "alphas"_a, "k_limit"_a, "lag"_a = 0)
      .def("observe", &DraftController::observe, "batch"_a, "k"_a, "total_s"_a, "draft_s"_a = -1.0,
           "verify_s"_a = -1.0)
      .def("observe_acceptance", &DraftController::observe_acceptance, "n_accepted"_a, "k"_a)
      .def("observe_catch_up", &DraftController::observe_catch_up, "tokens"_a, "seconds"_a)
      .def("prior", &DraftController::prior)
      .def_prop_ro("long_run_alpha", &DraftController::long_run_alpha)
      .def_prop_ro("catch_up_per_token", &DraftController::catch_up_per_token)
      .def("predicted_time", &DraftController::predicted_time, "batch"_a, "k"_a);
  nb::class_<AcceptanceEstimate>(m, "AcceptanceEstimate",
                                 "A sequence's running per-token acceptance (draft_controller.h)")
      .def(nb::init<>())
      .def_rw("accepted", &AcceptanceEstimate::accepted)
      .def_rw("rejected", &AcceptanceEstimate::rejected)
      .def("observe", &AcceptanceEstimate::observe, "n_accepted"_a, "k"_a,
           "decay"_a = AcceptanceEstimate::kDecay)
      .def("relax", &AcceptanceEstimate::relax, "mean"_a)
      .def_prop_ro("alpha", &AcceptanceEstimate::alpha);
  m.def("expected_tokens", &expected_tokens, "alpha"_a, "k"_a,
        "Mean tokens an iteration drafting k emits at per-token acceptance alpha");

  // ---- the acceptance step alone, for tests ------------------------------------------------
  m.def(
      "spec_trials",
      [](F32Matrix target_logits, F32Matrix draft_logits, float temperature, int top_k, float top_p,
         int n_trials, uint64_t first_seed) {
        // target_logits [k+1, V], draft_logits [k, Vd]: fixed per position (no model). Each
        // trial draws d_0..d_{k-1} with the draft rule and runs the acceptance step, with seed
        // first_seed + trial. Returns [n_trials, k + 2]: the emitted tokens (-1 padded), then
        // the number of accepted draft tokens.
        const int k = static_cast<int>(draft_logits.shape(0));
        const int V = static_cast<int>(target_logits.shape(1));
        const int Vd = static_cast<int>(draft_logits.shape(1));
        if (static_cast<int>(target_logits.shape(0)) != k + 1 || k < 1 || k > kMaxDraftLen)
          throw InvalidArgument("need target_logits [k+1, V] and draft_logits [k, Vd], k >= 1");
        SamplingParams p{temperature, top_k, top_p, 0};
        validate_sampling(p);
        std::vector<int32_t> out(static_cast<size_t>(n_trials) * (k + 2), -1);
        {
          nb::gil_scoped_release release;
          CpuBackend be(1);
          std::vector<float> q(static_cast<size_t>(k) * Vd);
          SeqState seq;
          SamplingState st{p, 0};
          const int32_t slot = 0;
          for (int t = 0; t < n_trials; ++t) {
            st.params.seed = first_seed + static_cast<uint64_t>(t);
            seq = SeqState{};
            std::memcpy(q.data(), draft_logits.data(), q.size() * 4);
            for (int j = 0; j < k; ++j)
              be.spec_draft_sample(q.data() + static_cast<size_t>(j) * Vd, 1, Vd, std::min(V, Vd),
                                   j, &seq, &slot, &st);
            be.spec_accept(target_logits.data(), q.data(), 1, k, V, Vd, &seq, &slot, &st);
            int32_t* row = out.data() + static_cast<size_t>(t) * (k + 2);
            for (int i = 0; i < seq.n_new; ++i) row[i] = seq.out[i];
            row[k + 1] = seq.n_acc;
          }
        }
        return owned_array<int32_t>(std::move(out),
                                    {static_cast<size_t>(n_trials), static_cast<size_t>(k + 2)});
      },
      "target_logits"_a, "draft_logits"_a, "temperature"_a, "top_k"_a, "top_p"_a, "n_trials"_a,
      "first_seed"_a = 0, "Runs draft sampling and the acceptance step on fixed logits");

  bind_ops_testing(m);
}
