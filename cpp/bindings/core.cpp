// core.cpp: the public nanobind module trt_spec._core, the only bridge between Python and C++
// that the wheel ships (test-only bindings live in testing.cpp, a module of their own).
//
// Exposes the engine schema constants and weight formats (defined once in C++; the Python
// builder reads them from here), the quantizers (for the builder), the names of draft sources,
// draft modes and finish reasons, the Runtime / Scheduler objects and the scheduler's data
// (Request in, Event and RequestStats out: events.h). Runtime errors map to Python exceptions:
// EngineFileError (a ValueError subclass), ValueError, RuntimeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>

#include "bindings/common.h"
#include "bindings/events.h"
#include "common/errors.h"
#include "engine/launch_plan.h"
#include "engine/runtime.h"
#include "engine/scheduler.h"
#include "format/engine_file.h"
#include "format/ggml_blocks.h"
#include "format/schema.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/l2_budget.h"
#include "spec/seq_state.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;
using namespace trt_spec::bindings;

namespace {

using F32Matrix = HostArray<float, 2>;

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "trt-spec native core: engine format, kernels and runtime";

  static nb::exception<EngineFileError> engine_file_error(m, "EngineFileError", PyExc_ValueError);
  register_value_errors();

  // ---- engine schema -------------------------------------------------------------------
  m.attr("ENGINE_MAGIC") = nb::bytes(kEngineMagic, 8);
  m.attr("ENGINE_FORMAT_VERSION") = kEngineFormatVersion;
  m.attr("ENGINE_FORMAT_OLDEST_VERSION") = kEngineFormatOldestVersion;
  m.attr("ENGINE_FORMAT_HEAD_VOCAB_VERSION") = kEngineFormatHeadVocabVersion;
  m.attr("ENGINE_FORMAT_RANDOM_WEIGHTS_VERSION") = kEngineFormatRandomWeightsVersion;
  m.attr("ENGINE_FORMAT_DRAFT_HEADS_VERSION") = kEngineFormatDraftHeadsVersion;
  m.attr("ENGINE_HEADER_BYTES") = kEngineHeaderBytes;
  m.attr("DATA_ALIGN") = kDataAlign;
  m.attr("SECTION_ALIGN") = kSectionAlign;
  m.attr("QUANT_GROUP") = kQuantGroup;
  m.attr("Q4_SUPER_BLOCK") = kQ4SuperBlock;
  m.attr("MAX_DRAFT_LEN") = kMaxDraftLen;
  // The CUDA backend's default prefetch budgets (kernels/cuda/l2_budget.h): a matmul block's own
  // weights, and the next ops' weights one launch hints.
  m.attr("CUDA_PREFETCH_BLOCK_BYTES") = cuda::kPrefetchBlockBytes;
  m.attr("CUDA_PREFETCH_NEXT_BYTES") = cuda::kPrefetchNextBytes;

  {
    nb::list archs;
    for (const char* a : kArchitectures) archs.append(a);
    m.attr("ARCHITECTURES") = nb::tuple(archs);
    nb::dict keys;
    for (const ConfigKey& k : kConfigKeys) keys[k.name] = k.type;
    m.attr("CONFIG_KEYS") = keys;
    nb::dict optional;
    for (const ConfigKey& k : kOptionalConfigKeys) optional[k.name] = k.type;
    m.attr("OPTIONAL_CONFIG_KEYS") = optional;
  }
  m.def(
      "engine_tensors",
      [](const std::string& config_json) {
        const ModelConfig c = ModelConfig::from_json(Json::parse(config_json));
        std::vector<std::tuple<std::string, int64_t, int64_t, std::vector<std::string>>> out;
        for (TensorSpec& t : engine_tensors(c))
          out.emplace_back(std::move(t.name), t.rows, t.cols, std::move(t.sources));
        return out;
      },
      "config_json"_a,
      "The engine tensors of a model config (JSON text): [(name, rows, cols, checkpoint "
      "tensors concatenated along rows)], in file order (format/schema.h); rows 1: a 1-D tensor");

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
      "data"_a, "The engine file's checksum of a uint8 array: XXH64 with seed 0");

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
  m.def(
      "decode_ggml_rows",
      [](HostArray<uint8_t, 2> blocks, int type, int64_t cols) {
        if (!format::ggml_type_decodable(type))
          throw InvalidArgument("decode_ggml_rows: ggml type " + std::to_string(type));
        int64_t elements = 0, bytes = 0;
        format::ggml_block_size(type, &elements, &bytes);
        const int64_t rows = blocks.shape(0);
        if (cols <= 0 || cols % elements != 0 ||
            static_cast<int64_t>(blocks.shape(1)) != cols / elements * bytes)
          throw InvalidArgument("decode_ggml_rows: " + std::to_string(blocks.shape(1)) +
                                " bytes per row for " + std::to_string(cols) + " elements");
        std::vector<float> out(static_cast<size_t>(rows) * cols);
        {
          nb::gil_scoped_release release;
          format::decode_ggml_rows(type, blocks.data(), rows, cols, out.data());
        }
        return owned_array<float>(std::move(out),
                                  {static_cast<size_t>(rows), static_cast<size_t>(cols)});
      },
      "blocks"_a, "type"_a, "cols"_a,
      "Decode ggml block rows [rows, bytes per row] of a ggml type id to float32 [rows, cols], "
      "bit-identical to the gguf package's dequantizers (Q4_0/1, Q5_0/1, Q8_0, Q4_K-Q6_K)");
  m.def("ggml_type_decodable", &format::ggml_type_decodable, "type"_a,
        "Whether decode_ggml_rows decodes this ggml type id");
  m.def(
      "weight_relative_error",
      [](U8Array blob, WeightType t, F32Matrix w) {
        const int64_t rows = w.shape(0), cols = w.shape(1);
        check_blob(blob, t, rows, cols);
        nb::gil_scoped_release release;
        return cpu::weight_relative_error(WeightView{t, rows, cols, blob.data()}, w.data());
      },
      "blob"_a, "t"_a, "w"_a,
      "||decode(blob) - w||_F / ||w||_F for a float32 [rows, cols] matrix w (in double)");

  // ---- devices ----------------------------------------------------------------------------
  m.def("cuda_compiled", &cuda_compiled, "Whether this build has the CUDA backend");
  m.def("cuda_available", &cuda_available,
        "Whether this build has the CUDA backend and a usable GPU is present");

  m.def(
      "cuda_launch_plan",
      [](const std::string& path, int batch, int draft_len, int sm_count, bool persistent) {
        LaunchPlan p;
        {
          nb::gil_scoped_release nogil;
          p = cuda_launch_plan(path, batch, draft_len, sm_count, persistent);
        }
        nb::dict d;
        d["batch"] = p.batch;
        d["draft_len"] = p.draft_len;
        d["sm_count"] = p.sm_count;
        d["persistent"] = p.persistent;
        d["target_layers"] = p.target_layers;
        d["draft_layers"] = p.draft_layers;
        d["target_step"] = p.target_step;
        d["draft_step"] = p.draft_step;
        d["iteration"] = p.iteration;
        d["iteration_kernels"] = p.iteration_kernels;
        return d;
      },
      "path"_a, "batch"_a = 1, "draft_len"_a = 4, "sm_count"_a = 132, "persistent"_a = false,
      "CUDA kernel launches of an engine's target step, draft step and one speculative iteration "
      "(B sequences, draft_len tokens), counted by the CUDA backend's own launch code without a "
      "GPU (a dict); persistent: with the persistent forward (one launch per model forward)");
  auto wave_dict = [](const KernelWave& w) {
    nb::dict d;
    d["kernel"] = w.kernel;
    d["blocks"] = w.blocks;
    d["blocks_per_sm"] = w.blocks_per_sm;
    d["resident"] = static_cast<int64_t>(w.blocks_per_sm) * w.sm_count;
    d["waves"] = w.waves();
    return d;
  };
  m.def(
      "cuda_matmul_wave",
      [wave_dict](const std::string& weight_type, int64_t rows, int64_t cols, int n, int sm_count) {
        return wave_dict(
            cuda_matmul_wave(weight_type_from_name(weight_type), rows, cols, n, sm_count));
      },
      "weight_type"_a, "rows"_a, "cols"_a, "n"_a, "sm_count"_a = 132,
      "The CUDA matmul launch of a [rows, cols] weight over n rows, as the backend plans it: "
      "kernel, blocks, blocks_per_sm, resident (blocks_per_sm sm_count) and waves (a dict; no "
      "GPU needed)");
  m.def(
      "cuda_attention_wave",
      [wave_dict](int n, int n_heads, int n_kv_heads, int head_dim, int max_seq, int sm_count) {
        return wave_dict(cuda_attention_wave(n, n_heads, n_kv_heads, head_dim, max_seq, sm_count));
      },
      "n"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a, "max_seq"_a, "sm_count"_a = 132,
      "The CUDA attention launch over n rows, as the backend plans it (a dict, as "
      "cuda_matmul_wave)");

  // ---- runtime ----------------------------------------------------------------------------
  nb::class_<Runtime>(m, "Runtime", "An opened engine file with its backend and target model")
      .def(
          "__init__",
          [](Runtime* self, const std::string& path, const std::string& device, int n_threads,
             bool verify, int prefill_chunk, const std::string& kv_type) {
            RuntimeOptions o;
            o.device = device;
            o.n_threads = n_threads;
            o.verify_checksums = verify;
            o.prefill_chunk = prefill_chunk;
            o.kv_type = kv_type;
            nb::gil_scoped_release release;
            new (self) Runtime(path, o);
          },
          "path"_a, "device"_a = "cpu", "n_threads"_a = 0, "verify"_a = true,
          "prefill_chunk"_a = 256, "kv_type"_a = "auto")
      .def_prop_ro("metadata_json", [](Runtime& r) { return r.file().json_text(); })
      .def_prop_ro("max_seq_len", &Runtime::max_seq_len)
      .def_prop_ro("max_batch", &Runtime::max_batch)
      .def_prop_ro("vocab_size", &Runtime::vocab_size)
      .def_prop_ro("backend_name", [](Runtime& r) { return r.backend().name(); })
      .def_prop_ro("threads", [](Runtime& r) { return r.backend().threads(); })
      .def_prop_ro("max_draft_len", &Runtime::max_draft_len,
                   "The most draft tokens per iteration (the build's --draft-len; 0: none)")
      .def_prop_ro("weight_bytes",
                   [](Runtime& r) {
                     return r.target().weight_bytes() + (r.draft() ? r.draft()->weight_bytes() : 0);
                   })
      .def_prop_ro("kv_type", [](Runtime& r) { return std::string(kv_type_name(r.kv_type())); })
      .def_prop_ro("prompt_attention", &Runtime::prompt_attention,
                   "The products prompt rows attend with: f32, or for q8 / q4 weights the "
                   "backend's faster ones (bf16, int16 on a CPU)")
      .def_prop_ro("kv_bytes",
                   [](Runtime& r) {
                     return r.target().kv_bytes() + (r.draft() ? r.draft()->kv_bytes() : 0);
                   })
      .def(
          "prompt_logits",
          [](Runtime& r, const std::vector<int32_t>& tokens, int chunk) {
            std::vector<float> out;
            {
              nb::gil_scoped_release release;
              out = r.prompt_logits(tokens, chunk);
            }
            size_t V = static_cast<size_t>(r.vocab_size());
            return owned_array<float>(std::move(out), {tokens.size(), V});
          },
          "tokens"_a, "chunk"_a = 0,
          "Logits [n, vocab] of every position of a prompt (target model), chunk rows per "
          "forward (0: as many as the engine allows)");

  // ---- names defined once in C++ --------------------------------------------------------
  {
    nb::list sources, modes, reasons;
    for (int i = 0; i < kDraftSourceCount; ++i)
      sources.append(draft_source_name(static_cast<DraftSource>(i)));
    for (const char* d : kDraftModes) modes.append(d);
    for (FinishReason r :
         {FinishReason::kStopToken, FinishReason::kStopString, FinishReason::kMaxNewTokens,
          FinishReason::kMaxSeqLen, FinishReason::kCancelled})
      reasons.append(finish_reason_name(r));
    m.attr("DRAFT_SOURCES") = nb::tuple(sources);
    m.attr("DRAFT_MODES") = nb::tuple(modes);
    m.attr("FINISH_REASONS") = nb::tuple(reasons);
    nb::list kv_types;  // RuntimeOptions::kv_type, "auto" first
    kv_types.append("auto");
    for (KvType t : {KvType::F32, KvType::F16, KvType::BF16}) kv_types.append(kv_type_name(t));
    m.attr("KV_CACHE_DTYPES") = nb::tuple(kv_types);
    m.attr("DEFAULT_DRAFT_WINDOW") = kDefaultDraftWindow;
    m.attr("DEFAULT_DRAFT_READ_CHUNK") = kDefaultDraftReadChunk;
  }

  bind_scheduler_types(m);

  nb::class_<Scheduler>(m, "Scheduler",
                        "Owns every request's life: queue, slots, chunked prefill, speculative "
                        "iterations, stops, cancellation, statistics (engine/scheduler.h)")
      .def(
          "__init__",
          [](Scheduler* self, Runtime& rt, const std::vector<nb::bytes>& token_bytes,
             int prefill_chunk, int interleave_chunk, bool carry_prefill, int draft_window,
             int draft_read_chunk, bool prompt_cache, int eagle_topk) {
            SchedulerOptions o;
            o.prompt_cache = prompt_cache;
            o.prefill_chunk = prefill_chunk;
            o.interleave_chunk = interleave_chunk;
            o.carry_prefill = carry_prefill;
            o.draft_window = draft_window;
            o.draft_read_chunk = draft_read_chunk;
            o.eagle_topk = eagle_topk;
            o.token_bytes.reserve(token_bytes.size());
            for (const nb::bytes& b : token_bytes) o.token_bytes.emplace_back(b.c_str(), b.size());
            nb::gil_scoped_release release;
            new (self) Scheduler(rt, std::move(o));
          },
          "runtime"_a, "token_bytes"_a = std::vector<nb::bytes>{}, "prefill_chunk"_a = 256,
          "interleave_chunk"_a = 64, "carry_prefill"_a = true,
          "draft_window"_a = kDefaultDraftWindow, "draft_read_chunk"_a = kDefaultDraftReadChunk,
          "prompt_cache"_a = true, "eagle_topk"_a = 1, nb::keep_alive<1, 2>())
      .def("submit", &Scheduler::submit, "request"_a,
           "Validates and queues a request (ValueError naming the bad field); returns its id")
      .def("cancel", &Scheduler::cancel, "id"_a, "Ends a request at the next step")
      .def("clear_prompt_cache", &Scheduler::clear_prompt_cache,
           "Forgets what the slots' caches hold (before writing a slot's cache directly)")
      .def("step", &Scheduler::step, nb::call_guard<nb::gil_scoped_release>(),
           "One scheduling step: an Event per request that produced something")
      .def_prop_ro("has_work", &Scheduler::has_work)
      .def_prop_ro("running", &Scheduler::running)
      .def_prop_ro("waiting", &Scheduler::waiting)
      .def_prop_ro("last_batch", &Scheduler::last_batch)
      .def_prop_ro("last_k", &Scheduler::last_k)
      .def_prop_ro("last_source", [](Scheduler& s) { return draft_source_name(s.last_source()); })
      .def_prop_rw(
          "use_graphs", [](Scheduler& s) { return s.iteration().use_graphs(); },
          [](Scheduler& s, bool on) { s.iteration().set_use_graphs(on); },
          "Replay each iteration as one captured graph where the backend has graphs (CUDA; "
          "default); False launches the same ops one by one")
      .def_prop_ro(
          "graphs_captured", [](Scheduler& s) { return s.iteration().graphs_captured(); },
          "Iteration graphs captured so far (one per draft source, batch size and length)");
}
