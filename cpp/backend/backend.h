// backend.h: the interface every compute backend implements (CPU, CUDA; a TensorRT backend
// could plug in the same way).
//
// The runtime runs a fixed sequence of these operations over memory the backend owns. Every
// pointer passed to an op is backend memory (device memory on a GPU), and so is every value
// an op needs at run time (token ids, positions, KV slots, sampling state): nothing an op
// does depends on host data written between ops, so a GPU backend can capture a sequence of
// ops as one graph. Ops may run asynchronously; synchronize() waits for all of them.
//
// Row metadata: a batch of n token rows carries, in backend memory,
//   tokens int32 [n], pos int32 [n] (position of the row in its sequence), slot int32 [n]
//   (KV-cache slot of the row's sequence). Prefill, decode, multi-token verify and batches of
//   sequences are all just different n and row metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "kernels/sampling.h"
#include "spec/speculative.h"
#include "kernels/weight_format.h"

namespace trt_spec {

// KV cache of one model, f32: k and v each [slots, layers, kv_heads, max_seq, head_dim].
struct KvCache {
  float* k = nullptr;
  float* v = nullptr;
  int slots = 0, layers = 0, kv_heads = 0, max_seq = 0, head_dim = 0;

  size_t slot_layer_offset(int slot, int layer) const {
    return ((static_cast<size_t>(slot) * layers + layer) * kv_heads) * max_seq * head_dim;
  }
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;  // usually 1 / sqrt(head_dim)
};

// Per-slot sampling state in backend memory: parameters and the step counter of the RNG.
struct SamplingState {
  SamplingParams params;
  uint64_t step = 0;  // advanced by sample()
};

// A recorded sequence of backend ops (a CUDA graph), replayed as one unit by launch(): the same
// ops over the same memory, reading whatever that memory holds at launch time.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  virtual void launch() = 0;  // asynchronous, like the ops it replays
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;
  // True when ops run in order on the calling thread (the CPU): the host may time phases
  // between ops for free. False for devices with asynchronous streams.
  virtual bool runs_on_host() const = 0;

  // Memory: zero-initialised, 64-byte aligned.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Makes an engine tensor (host memory, memory-mapped) usable by ops; the CPU backend uses
  // the mapping as it is, a GPU backend copies it to device memory.
  virtual WeightView import_weight(const WeightView& host) = 0;

  // Graphs: capture(issue_ops) records the ops issue_ops() issues (without running them) and
  // returns them as a graph to launch any number of times; nullptr where the backend has no
  // graphs (the caller then issues the ops itself). issue_ops may be called more than once.
  // Graphs live no longer than their backend.
  virtual bool supports_graphs() const { return false; }
  virtual std::unique_ptr<BackendGraph> capture(const std::function<void()>& issue_ops) {
    return nullptr;
  }

  // out [n, table.cols] = rows tokens[i] of table
  virtual void embed(WeightView table, const int32_t* tokens, int n, float* out) = 0;
  // out [n, dim] = x * rsqrt(mean(x^2) + eps) * w      (w: f32 [dim])
  virtual void rmsnorm(const float* x, WeightView w, float eps, int n, int dim, float* out) = 0;
  // out [n, w.rows] = x [n, w.cols] @ W^T (+ bias [w.rows] when bias.data != nullptr)
  virtual void linear(WeightView w, WeightView bias, const float* x, int n, float* out) = 0;
  // In place on qkv [n, (n_heads + 2 n_kv_heads) head_dim]: rotate the q and k parts of row i
  // by position pos[i] (rotate-half convention); cos/sin tables are f32 [max_seq, head_dim/2].
  virtual void rope(float* qkv, const int32_t* pos, int n, const AttentionShape& shape,
                    const float* cos_table, const float* sin_table) = 0;
  // Writes the k, v parts of each qkv row into cache (slot[i], layer, :, pos[i]), then
  // out [n, n_heads head_dim] = causal attention of each row's q over its slot's positions
  // [0, pos[i]].
  virtual void attention(const float* qkv, const int32_t* pos, const int32_t* slot, int n,
                         const AttentionShape& shape, KvCache& cache, int layer, float* out) = 0;
  // out [n, ffn] = silu(gate_up[:, :ffn]) * gate_up[:, ffn:]     (gate_up [n, 2 ffn])
  virtual void swiglu(const float* gate_up, int n, int ffn, float* out) = 0;
  // x [count] += y [count]
  virtual void add(float* x, const float* y, size_t count) = 0;
  // dst [n, dim] = src rows rows[i]
  virtual void gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst) = 0;
  // out_tokens[i] = a token drawn from logits [n, vocab] row i by the rule in sampling.h, with
  // the state of slot[i] (its params; step counter used then advanced by one).
  virtual void sample(const float* logits, int n, int vocab, const int32_t* slot,
                      SamplingState* states, int32_t* out_tokens) = 0;

  // ---- The speculative iteration (kernels/speculative.h). Row b = 0 .. B-1 of these ops is
  // the sequence in KV slot slots[b], whose state is seqs[slots[b]].
  //
  // Row metadata of `count` rows per sequence: row r of sequence b holds the token of offset
  // i = first + r (i = -1: prev, 0: last, i >= 1: draft[i - 1]) at position n_past + i.
  // Draft step 0 is (first -1, count 2), draft step j > 0 is (j, 1), verify is (0, k + 1).
  virtual void spec_rows(const SeqState* seqs, const int32_t* slots, int B, int first, int count,
                         int32_t* tokens, int32_t* pos, int32_t* row_slots) = 0;
  // Draft step j: draws d_j of each sequence from the draft's logits [B, vocab] (only ids below
  // vocab_common may be drawn) into seqs[.].draft[j], and, for sequences that sample
  // (temperature > 0), turns the row in place into q_j, the dense distribution it was drawn from.
  virtual void spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j,
                                 SeqState* seqs, const int32_t* slots,
                                 const SamplingState* states) = 0;
  // Acceptance, output and rollback of every sequence: target logits [B, k + 1, vocab], draft
  // distributions q [k, B, vocab_draft] (from spec_draft_sample); ends with spec_commit().
  virtual void spec_accept(const float* logits, const float* q, int B, int k, int vocab,
                           int vocab_draft, SeqState* seqs, const int32_t* slots,
                           const SamplingState* states) = 0;
};

// Owning handle to backend memory (released with the handle).
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& be, size_t bytes) : be_(&be), ptr_(be.alloc(bytes)), bytes_(bytes) {}
  ~BackendBuffer() { reset(); }
  BackendBuffer(BackendBuffer&& o) noexcept { *this = std::move(o); }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (ptr_) be_->release(ptr_);
    ptr_ = nullptr;
  }

 private:
  Backend* be_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace trt_spec
