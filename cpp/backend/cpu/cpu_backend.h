// cpu_backend.h: the CPU implementation of Backend (backend.h): multithreaded ops over host
// memory, matrix products through the runtime-dispatched kernels in kernels/cpu/matmul.h.
// Token selection (the sampling rule) lives in cpu_sampling.cpp.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

namespace trt_spec {

class CpuBackend : public Backend {  // (tests derive a scripted-clock backend)
 public:
  // n_threads <= 0: one per available core. Prompt rows (Rows::prompt_from) attend in f32, and
  // once follow_weights(true) says the engine's weights are q8 / q4, in bf16 where the CPU runs
  // it, else in int16 (kernels/cpu/attention.h: PromptMath); TRT_SPEC_CPU_PROMPT_ATTENTION
  // overrides both: bf16 (an error where the CPU cannot), int16 or f32 (auto, or unset: by the
  // weights). Models whose head_dim is not a multiple of 16 keep f32 prompts.
  explicit CpuBackend(int n_threads);
  ~CpuBackend() override;

  std::string name() const override;
  int threads() const override { return pool_.size(); }
  bool runs_on_host() const override { return true; }
  std::string prompt_attention() const override;
  void follow_weights(bool quantized) override;

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  WeightView import_weight(const WeightView& host) override { return host; }
  // Q8 / Q4: a repacked copy in the matmul's row-block layout (owned by the backend); else host.
  WeightView import_matmul_weight(const WeightView& host) override;
  WeightView random_weight(WeightType t, int64_t rows, int64_t cols, const RandomFill& fill,
                           bool matmul) override;

  void embed(WeightView table, const int32_t* tokens, int n, float* out) override;
  void rmsnorm(const float* x, WeightView w, float eps, int n, int dim, float* out) override;
  void linear(WeightView w, WeightView bias, const float* x, int n, float* out) override;
  void rope(float* qkv, const int32_t* pos, int n, const AttentionShape& shape,
            const float* cos_table, const float* sin_table) override;
  void kv_write(const float* qkv, const Rows& rows, int n, const AttentionShape& shape,
                KvCache& cache, int layer) override;
  void attention(const float* qkv, const Rows& rows, int n, const AttentionShape& shape,
                 KvCache& cache, int layer, float* out) override;
  void kv_copy(KvCache& cache, const int32_t* slot, const int32_t* src, const int32_t* dst,
               int n) override;
  void kv_copy_prefix(KvCache& cache, int src_slot, int dst_slot, int n) override;
  void swiglu(const float* gate_up, int n, int ffn, float* out) override;
  void add(float* x, const float* y, size_t count) override;
  void gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst) override;
  void expand_columns(const float* src, int src_cols, const int32_t* index, int n, int width,
                      float* out) override;
  void sample(const float* logits, int n, int vocab, const int32_t* slot, SamplingState* states,
              int32_t* out_tokens) override;
  void logprobs(const float* logits, int vocab, int n, const int32_t* rows, const int32_t* tokens,
                const int32_t* slot, const SamplingState* states, TokenLogprob* out) override;

  ThreadPool& pool() { return pool_; }

 private:
  cpu::QuantActs quant_scratch(int n, int cols);

  ThreadPool pool_;
  const cpu::MatmulKernels& kernels_;
  bool prompt_auto_ = true;                     // TRT_SPEC_CPU_PROMPT_ATTENTION: auto (or unset)
  std::optional<cpu::PromptMath> prompt_math_;  // none: f32 prompt rows
  void* qscratch_ = nullptr;  // quantized activations, grown to the largest [n, cols] seen
  size_t qscratch_bytes_ = 0;
  std::mutex map_mu_;
  std::unordered_map<void*, size_t> mapped_;  // mmap-ed allocations and their sizes
  // import_matmul_weight's and random_weight's blobs
  std::vector<std::unique_ptr<uint8_t, void (*)(void*)>> repacked_;
};

// Draws one token from logits [vocab] by the rule in kernels/sampling.h (exposed for tests).
int32_t sample_row(const float* logits, int vocab, const SamplingParams& p, uint64_t step,
                   uint32_t lane);
// probs [vocab] = the dense distribution that rule draws from, over ids [0, n_valid) (zero
// beyond); one-hot at the argmax when greedy.
void sampling_probs(const float* logits, int n_valid, int vocab, const SamplingParams& p,
                    float* probs);
// Index-order inverse CDF of the weights [n] (any positive total) for the uniform u; the last
// token with weight when rounding leaves u * total unreached.
int32_t sample_dense(const float* weights, int n, float u);
// The lowest index among the maxima of x [n].
int32_t argmax_row(const float* x, int n);

}  // namespace trt_spec
