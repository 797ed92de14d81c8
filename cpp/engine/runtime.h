// runtime.h: an opened engine: the mapped file, a backend, and the target and draft models on
// it.
//
// Limits (max_seq_len, max_batch, max_draft_len: the build's --draft-len) come from the engine's
// build options; the per-forward row budget from the prefill chunk size, and at least max_batch
// (max_draft_len + 1) rows for the target's verify pass.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "format/engine_file.h"
#include "model/model.h"

namespace trt_spec {

struct RuntimeOptions {
  std::string device = "cpu";  // "cpu", "cuda" (or "cuda:N"), "auto" (see make_backend)
  int n_threads = 0;           // CPU threads; 0: one per core
  bool verify_checksums = true;
  int prefill_chunk = 256;  // token rows per forward during prefill
  // KV cache element type: "f32", "f16", "bf16" or "auto" (f16 on a GPU, f32 on the CPU).
  std::string kv_type = "auto";
};

class Runtime {
 public:
  Runtime(const std::string& path, const RuntimeOptions& opts);
  // On a given backend (opts.device and opts.n_threads are not used).
  Runtime(const std::string& path, const RuntimeOptions& opts, std::unique_ptr<Backend> backend);
  ~Runtime();

  const EngineFile& file() const { return *file_; }
  Backend& backend() { return *backend_; }
  Model& target() { return *target_; }
  Model* draft() { return draft_.get(); }  // null without a draft model
  // The most draft tokens per iteration (tree nodes, any source); 0: no speculation.
  int max_draft_len() const { return max_draft_len_; }
  int max_seq_len() const { return max_seq_; }
  int max_batch() const { return max_batch_; }
  int vocab_size() const { return target_->config().vocab_size; }
  KvType kv_type() const { return kv_type_; }
  // The products prompt rows attend with: "f32" for f32, f16 and bf16 weights; the backend's
  // faster ones ("bf16", "int16" on a CPU) may serve q8 and q4 weights (Backend::follow_weights).
  std::string prompt_attention() const { return backend_->prompt_attention(); }

  // Full logits [n, vocab] of a prompt run from position 0 in KV slot 0 (for tests and
  // scoring); overwrites that slot's cache.
  // chunk: rows per forward (0: the model's row budget). draft: the draft model's logits
  // [n, its vocab] (-inf outside a reduced head), from its own cache.
  std::vector<float> prompt_logits(const std::vector<int32_t>& tokens, int chunk = 0,
                                   bool draft = false);

 private:
  std::unique_ptr<EngineFile> file_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> target_, draft_;
  int max_seq_ = 0, max_batch_ = 1, max_draft_len_ = 0;
  KvType kv_type_ = KvType::F32;
};

// The KV cache type RuntimeOptions::kv_type names ("auto": f16 on a GPU, f32 on the CPU).
// Throws InvalidArgument for anything but auto, f32, f16, bf16.
KvType resolve_kv_type(const std::string& kv_type, bool gpu);

// Backend selection. device: "cpu"; "cuda" or "cuda:N" (GPU N, default 0); "auto": the GPU when
// this build has the CUDA backend and a GPU is present, else the CPU. Throws InvalidArgument for
// an unknown device or a CUDA device this machine or build cannot provide.
std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads);
bool cuda_compiled();   // this build has the CUDA backend
bool cuda_available();  // ... and a usable GPU is present

// Checks that every id lies in [0, vocab); throws InvalidArgument naming the first bad one.
void check_token_ids(const std::vector<int32_t>& ids, int vocab, const char* what);

}  // namespace trt_spec
