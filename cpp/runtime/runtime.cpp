// runtime.cpp: engine opening and backend selection (runtime.h).
#include "runtime/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "runtime/cpu_backend.h"
#include "runtime/errors.h"

namespace trt_spec {

void check_token_ids(const std::vector<int32_t>& ids, int vocab, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InvalidArgument(std::string(what) + " holds token id " + std::to_string(ids[i]) +
                            " at index " + std::to_string(i) + ", outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
  }
}

Runtime::Runtime(const std::string& path, const RuntimeOptions& opts) {
  if (opts.device != "cpu")
    throw InvalidArgument("unknown device '" + opts.device + "' (this build has: cpu)");
  if (opts.prefill_chunk < 1) throw InvalidArgument("prefill_chunk must be >= 1");
  file_ = std::make_unique<EngineFile>(path, opts.verify_checksums);
  const Json& build = file_->meta().at("build");
  max_seq_ = static_cast<int>(build.at("max_seq_len").as_int());
  max_batch_ = static_cast<int>(build.at("max_batch").as_int());
  if (max_seq_ < 1 || max_batch_ < 1)
    throw EngineFileError("engine metadata: max_seq_len and max_batch must be positive");
  const Json& models = file_->meta().at("models");
  const bool has_draft = models.has("draft");
  if (has_draft) {
    // Engines from before --draft-len was stored draft 4 tokens at most.
    draft_len_ = static_cast<int>(build.get_int("draft_len", 4));
    if (draft_len_ < 1 || draft_len_ > kMaxDraftLen)
      throw EngineFileError("engine metadata: draft_len must be in [1, " +
                            std::to_string(kMaxDraftLen) + "]");
  }
  const int chunk = std::min(opts.prefill_chunk, max_seq_);
  ModelLimits lim{max_seq_, max_batch_, std::max(chunk, max_batch_ * (draft_len_ + 1))};
  ModelLimits dlim{max_seq_, max_batch_, std::max(chunk, 2 * max_batch_)};
  // Refuse KV caches larger than this machine's memory before touching them.
  double kv_bytes = static_cast<double>(
      kv_cache_bytes(ModelConfig::from_json(models.at("target").at("config")), lim));
  if (has_draft)
    kv_bytes += static_cast<double>(
        kv_cache_bytes(ModelConfig::from_json(models.at("draft").at("config")), dlim));
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (kv_bytes > 0.9 * ram)
    throw Error("this engine's KV caches (max_seq_len " + std::to_string(max_seq_) +
                " x max_batch " + std::to_string(max_batch_) + ") need " +
                std::to_string(kv_bytes / 1e9) +
                " GB, more than this machine's memory: rebuild with a smaller --max-seq-len");
  backend_ = std::make_unique<CpuBackend>(opts.n_threads);
  target_ = std::make_unique<Model>(*file_, "target", *backend_, lim);
  if (has_draft) draft_ = std::make_unique<Model>(*file_, "draft", *backend_, dlim);
}

Runtime::~Runtime() {
  draft_.reset();
  target_.reset();  // before the backend and the mapping it points into
  backend_.reset();
}

std::vector<float> Runtime::prompt_logits(const std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw InvalidArgument("prompt_logits needs at least one token");
  if (n > max_seq_)
    throw InvalidArgument("prompt has " + std::to_string(n) + " tokens; max_seq_len is " +
                          std::to_string(max_seq_));
  check_token_ids(tokens, vocab_size(), "prompt");
  const int R = target_->limits().max_rows, V = vocab_size();
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
    target_->forward(tok.as<int32_t>(), pos.as<int32_t>(), slot.as<int32_t>(), m,
                     rows.as<int32_t>(), m, logits.as<float>());
    be.download(out.data() + static_cast<size_t>(start) * V, logits.as<void>(),
                static_cast<size_t>(m) * V * 4);
  }
  be.synchronize();
  return out;
}

}  // namespace trt_spec
