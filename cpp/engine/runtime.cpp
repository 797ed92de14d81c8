// runtime.cpp: engine opening and backend selection (runtime.h).
#include "engine/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "common/errors.h"
#include "spec/seq_state.h"

#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#endif

namespace trt_spec {

bool cuda_compiled() {
#ifdef TRT_SPEC_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() {
#ifdef TRT_SPEC_WITH_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

namespace {

// The GPU index of "cuda" / "cuda:N"; -1 for anything else.
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return -1;
  int i = 0;
  for (size_t c = 5; c < device.size(); ++c) {
    if (device[c] < '0' || device[c] > '9') return -1;
    i = 10 * i + (device[c] - '0');
  }
  return i;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads) {
  if (device == "cpu" || (device == "auto" && !cuda_available()))
    return std::make_unique<CpuBackend>(n_threads);
  const int gpu = device == "auto" ? 0 : cuda_index(device);
  if (gpu < 0)
    throw InvalidArgument("unknown device '" + device + "' (this build has: " +
                          (cuda_compiled() ? "auto, cpu, cuda, cuda:N)" : "auto, cpu)"));
#ifdef TRT_SPEC_WITH_CUDA
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0)
    throw InvalidArgument("device '" + device + "': no CUDA GPU is available on this machine (" +
                          why + "); use device='cpu' or 'auto'");
  if (gpu >= count)
    throw InvalidArgument("device '" + device + "': this machine has " + std::to_string(count) +
                          " CUDA GPU(s)");
  return make_cuda_backend(gpu);
#else
  throw InvalidArgument("device '" + device +
                        "': this build of trt-spec has no CUDA backend (no CUDA compiler was found "
                        "when it was built); use device='cpu' or 'auto'");
#endif
}

KvType resolve_kv_type(const std::string& kv_type, bool gpu) {
  if (kv_type == "auto") return gpu ? KvType::F16 : KvType::F32;
  KvType t;
  if (!parse_kv_type(kv_type, &t))
    throw InvalidArgument("unknown KV cache type '" + kv_type +
                          "': kv_cache_dtype must be auto, f32, f16 or bf16");
  return t;
}

void check_token_ids(const std::vector<int32_t>& ids, int vocab, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InvalidArgument(std::string(what) + " holds token id " + std::to_string(ids[i]) +
                            " at index " + std::to_string(i) + ", outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
  }
}

namespace {
// The backend of opts, once the options that need none are checked (a bad name throws first).
std::unique_ptr<Backend> checked_backend(const RuntimeOptions& opts) {
  if (opts.prefill_chunk < 1) throw InvalidArgument("prefill_chunk must be >= 1");
  resolve_kv_type(opts.kv_type, false);
  return make_backend(opts.device, opts.n_threads);
}
}  // namespace

Runtime::Runtime(const std::string& path, const RuntimeOptions& opts)
    : Runtime(path, opts, checked_backend(opts)) {}

Runtime::Runtime(const std::string& path, const RuntimeOptions& opts,
                 std::unique_ptr<Backend> backend) {
  if (opts.prefill_chunk < 1) throw InvalidArgument("prefill_chunk must be >= 1");
  if (!backend) throw InvalidArgument("Runtime: no backend");
  backend_ = std::move(backend);
  kv_type_ = resolve_kv_type(opts.kv_type, !backend_->runs_on_host());
  file_ = std::make_unique<EngineFile>(path, opts.verify_checksums);
  const Json build = file_->meta().at("build");
  const int64_t max_seq = build.at("max_seq_len").as_int();
  const int64_t max_batch = build.at("max_batch").as_int();
  if (max_seq < 1 || max_batch < 1)
    throw EngineFileError("engine metadata: max_seq_len and max_batch must be positive");
  if (max_seq > (int64_t{1} << 24) || max_batch > (int64_t{1} << 16))
    throw EngineFileError(
        "engine metadata: max_seq_len (at most 2^24) or max_batch (at most "
        "2^16) is too large");
  max_seq_ = static_cast<int>(max_seq);
  max_batch_ = static_cast<int>(max_batch);
  // Prompt rows attend in f32 unless the weights are quantized (Backend::follow_weights).
  const std::string weights = build.get_string("weights", "");
  backend_->follow_weights(weights == "q8" || weights == "q4");
  const Json models = file_->meta().at("models");
  const bool has_draft = models.has("draft");
  const bool any_draft = has_draft || file_->meta().has("draft_heads");  // (a model, or heads)
  // The most draft tokens per iteration, any source. Engines from before --draft-len was stored
  // drafted 4 tokens at most with a draft model, and none without.
  const int64_t draft_len = build.get_int("draft_len", has_draft ? 4 : 0);
  max_draft_len_ = static_cast<int>(std::clamp<int64_t>(draft_len, -1, kMaxDraftLen + 1));
  if (max_draft_len_ < (any_draft ? 1 : 0) || max_draft_len_ > kMaxDraftLen)
    throw EngineFileError("engine metadata: draft_len must be in [" +
                          std::to_string(any_draft ? 1 : 0) + ", " + std::to_string(kMaxDraftLen) +
                          "]");
  const int chunk = std::min(opts.prefill_chunk, max_seq_);
  ModelLimits lim{max_seq_, max_batch_, std::max(chunk, max_batch_ * (max_draft_len_ + 1)),
                  kv_type_};
  // (a draft reads up to k + 1 rows per sequence at once: a parallel draft's forward)
  ModelLimits dlim{max_seq_, max_batch_, std::max(chunk, max_batch_ * (max_draft_len_ + 1)),
                   kv_type_};
  // Refuse KV caches larger than this machine's memory before touching them.
  double kv_bytes = static_cast<double>(
      kv_cache_bytes(ModelConfig::from_json(models.at("target").at("config")), lim));
  if (has_draft)
    kv_bytes += static_cast<double>(
        kv_cache_bytes(ModelConfig::from_json(models.at("draft").at("config")), dlim));
  double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const char* where = "this machine's memory";
#ifdef TRT_SPEC_WITH_CUDA
  auto* gpu = dynamic_cast<CudaBackend*>(backend_.get());
  if (gpu && gpu->is_planning()) ram = 1e30;  // (nothing is allocated on a device)
  if (gpu && !gpu->is_planning()) {
    ram = static_cast<double>(cuda_device_info(gpu->device()).free_bytes);
    where = "the GPU's free memory";
  }
#endif
  if (kv_bytes > 0.9 * ram)
    throw Error("this engine's KV caches (max_seq_len " + std::to_string(max_seq_) +
                " x max_batch " + std::to_string(max_batch_) + ") need " +
                std::to_string(kv_bytes / 1e9) + " GB, more than " + where +
                ": rebuild with a smaller --max-seq-len");
  target_ = std::make_unique<Model>(*file_, "target", *backend_, lim);
  if (has_draft) draft_ = std::make_unique<Model>(*file_, "draft", *backend_, dlim);
}

Runtime::~Runtime() {
  draft_.reset();
  target_.reset();  // before the backend and the mapping it points into
  backend_.reset();
}

std::vector<float> Runtime::prompt_logits(const std::vector<int32_t>& tokens, int chunk,
                                          bool draft) {
  if (draft && !draft_) throw InvalidArgument("prompt_logits: this engine has no draft model");
  Model& model = draft ? *draft_ : *target_;
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw InvalidArgument("prompt_logits needs at least one token");
  if (n > max_seq_)
    throw InvalidArgument("prompt has " + std::to_string(n) + " tokens; max_seq_len is " +
                          std::to_string(max_seq_));
  const int max_rows = model.limits().max_rows, V = model.config().vocab_size;
  check_token_ids(tokens, V, "prompt");
  const int R = chunk > 0 ? std::min(chunk, max_rows) : max_rows;
  Backend& be = *backend_;
  BackendBuffer tok(be, R * 4), pos(be, R * 4), slot(be, R * 4), rows(be, R * 4);
  BackendBuffer logits(be, static_cast<size_t>(R) * V * 4);
  std::vector<float> out(static_cast<size_t>(n) * V);
  std::vector<int32_t> p(R), r(R), s(R, 0);
  std::iota(r.begin(), r.end(), 0);
  be.upload(slot.as<void>(), s.data(), R * 4);
  be.upload(rows.as<void>(), r.data(), R * 4);
  for (int start = 0; start < n; start += R) {
    int m = std::min(R, n - start);
    std::iota(p.begin(), p.begin() + m, start);
    be.upload(tok.as<void>(), tokens.data() + start, m * 4);
    be.upload(pos.as<void>(), p.data(), m * 4);
    Rows prompt_rows{tok.as<int32_t>(), pos.as<int32_t>(), slot.as<int32_t>()};
    prompt_rows.prompt_from = 0;  // as a prefill reads them
    model.forward(prompt_rows, m, rows.as<int32_t>(), m, logits.as<float>());
    be.download(out.data() + static_cast<size_t>(start) * V, logits.as<void>(),
                static_cast<size_t>(m) * V * 4);
  }
  be.synchronize();
  return out;
}

}  // namespace trt_spec
