// backend.h: the interface every compute backend implements (CPU, CUDA; a TensorRT backend
// could plug in the same way).
//
// The runtime runs a fixed sequence of these operations over memory the backend owns. Every
// pointer passed to an op is backend memory (device memory on a GPU), and so is every value
// an op needs at run time (token ids, positions, KV slots, sampling state): nothing an op
// does depends on host data written between ops, so a GPU backend can capture a sequence of
// ops as one graph. Ops may run asynchronously; synchronize() waits for all of them.
//
// Row metadata (struct Rows): a batch of n token rows carries, in backend memory, tokens, the
// position of each row in its sequence (RoPE), the KV-cache slot of its sequence, and
// optionally the cache index its k and v go to and a tree mask (the verify pass of a draft
// tree, spec/draft_tree.h). Prefill, decode, multi-token verify, trees and batches of sequences
// are all just different n and row metadata.
//
// The backend knows nothing of speculation: the speculative iteration's own ops (proposals,
// acceptance, prompt lookup) live in spec/ (spec_ops.h) and run on the same device.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "kernels/kv_format.h"
#include "kernels/random_fill.h"
#include "kernels/sampling.h"
#include "kernels/weight_format.h"

namespace trt_spec {

// KV cache of one model: k and v each [slots, layers, kv_heads, max_seq, head_dim] elements of
// `type` (kernels/kv_format.h: f32, f16 or bf16; written rounded to nearest even, read exactly).
struct KvCache {
  void* k = nullptr;
  void* v = nullptr;
  KvType type = KvType::F32;
  int slots = 0, layers = 0, kv_heads = 0, max_seq = 0, head_dim = 0;

  int elem_bytes() const { return kv_type_bytes(type); }
  // Elements of k (or v).
  size_t elements() const {
    return static_cast<size_t>(slots) * layers * kv_heads * max_seq * head_dim;
  }
  // Element offset of (slot, layer, kv head 0, index 0, dim 0).
  size_t slot_layer_offset(int slot, int layer) const {
    return ((static_cast<size_t>(slot) * layers + layer) * kv_heads) * max_seq * head_dim;
  }
};

// Row metadata of n rows (backend memory; the optional arrays may be null).
struct Rows {
  const int32_t* tokens = nullptr;  // [n]
  const int32_t* pos = nullptr;     // [n] position in the sequence (RoPE)
  const int32_t* slot = nullptr;    // [n] KV-cache slot of the row's sequence
  // [n] the cache index the row's k and v are written to, and the last index it attends;
  // null: pos. (A tree's siblings share a position but not a cache index.)
  const int32_t* kv_idx = nullptr;
  // [n] with tree_bits: a cache index t >= tree_base[i] counts for row i only where bit
  // (t - tree_base[i]) of tree_bits[i] is set. Null: every index up to kv_idx (causal).
  const int32_t* tree_base = nullptr;
  const uint64_t* tree_bits = nullptr;
  // Rows i >= prompt_from read a prompt (prefill chunks, prompt rows carried by a verify pass,
  // the draft's prompt reads): a backend may attend them at reduced precision (the CPU's bf16
  // prompt attention, kernels/cpu/attention.h) where a row's bits still depend on its own inputs
  // only, so a prompt reads the same whichever pass carries it. Rows whose bits must equal a
  // decode row's (decode, verify, draft steps and catch-up) stand before it. INT_MAX: none.
  int prompt_from = INT_MAX;
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
  // The products prompt rows (Rows::prompt_from) attend with: "f32" (as every other row), or a
  // backend's faster ones ("bf16", "int16": the CPU's, kernels/cpu/attention.h).
  virtual std::string prompt_attention() const { return "f32"; }
  // Called by the runtime once it knows the engine's weight format: a backend with faster prompt
  // products may keep them for quantized (q8 / q4) weights only, so that an f32, f16 or bf16
  // engine attends every row in f32 (the same text on every host). Default: nothing.
  virtual void follow_weights(bool quantized) {}
  // A model forward of n rows issues its ops between begin_forward(n) and end_forward(true)
  // (end_forward(false): it threw, drop what was held). A backend may hold the ops in between and
  // run them as one unit at the end (the CUDA backend's persistent forward); every op outside a
  // forward, and every op it cannot hold, runs as issued. Default: nothing.
  virtual void begin_forward(int n) {}
  virtual void end_forward(bool run) {}

  // Memory: zero-initialised, 64-byte aligned.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Makes an engine tensor (host memory, memory-mapped) usable by ops; the CPU backend uses
  // the mapping as it is, a GPU backend copies it to device memory.
  virtual WeightView import_weight(const WeightView& host) = 0;
  // The same for a weight only linear() and the fused matmul ops read (a layer's projections,
  // the output head), which a backend may store in its matmul's own layout. Default:
  // import_weight. The CPU backend repacks Q8 / Q4 codes (kernels/cpu/repack_lanes.h).
  virtual WeightView import_matmul_weight(const WeightView& host) { return import_weight(host); }
  // A [rows, cols] weight of type t holding random values (kernels/random_fill.h), made in the
  // backend's own memory (a GPU fills it on the device): an engine model with random_weights has
  // no tensor data. matmul: as import_matmul_weight. The same fill gives the same bits on every
  // backend.
  virtual WeightView random_weight(WeightType t, int64_t rows, int64_t cols, const RandomFill& fill,
                                   bool matmul) = 0;

  // Graphs: capture(issue_ops) records the ops issue_ops() issues (without running them) and
  // returns them as a graph to launch any number of times; nullptr where the backend has no
  // graphs (the caller then issues the ops itself). issue_ops may be called more than once.
  // Graphs live no longer than their backend.
  virtual bool supports_graphs() const { return false; }
  virtual std::unique_ptr<BackendGraph> capture(const std::function<void()>& issue_ops) {
    return nullptr;
  }

  // out [n, table.cols] = rows tokens[i] of table; zeros for an id outside [0, table.rows) (a
  // target token a smaller draft vocabulary lacks never reads past the table)
  virtual void embed(WeightView table, const int32_t* tokens, int n, float* out) = 0;
  // out [n, dim] = x * rsqrt(mean(x^2) + eps) * w      (w: f32 [dim])
  virtual void rmsnorm(const float* x, WeightView w, float eps, int n, int dim, float* out) = 0;
  // out [n, w.rows] = x [n, w.cols] @ W^T (+ bias [w.rows] when bias.data != nullptr)
  virtual void linear(WeightView w, WeightView bias, const float* x, int n, float* out) = 0;
  // In place on qkv [n, (n_heads + 2 n_kv_heads) head_dim]: rotate the q and k parts of row i
  // by position pos[i] (rotate-half convention); cos/sin tables are f32 [max_seq, head_dim/2].
  virtual void rope(float* qkv, const int32_t* pos, int n, const AttentionShape& shape,
                    const float* cos_table, const float* sin_table) = 0;
  // Writes the k and v parts of each (already rotated) qkv row into cache (slot[i], layer, :,
  // kv_idx[i] or pos[i]), rounded to the cache's type (kernels/kv_format.h; every backend
  // stores the same bits).
  virtual void kv_write(const float* qkv, const Rows& rows, int n, const AttentionShape& shape,
                        KvCache& cache, int layer) = 0;
  // Reads the cache only (kv_write put the rows' own entries there first):
  // out [n, n_heads head_dim] = attention of each row's q (the q part of qkv) over its slot's
  // cache indices [0, kv_idx[i]] (under the tree mask, if any), in logical order (Rows): a row's
  // result depends on its own q and entries only, never on n or the other rows.
  virtual void attention(const float* qkv, const Rows& rows, int n, const AttentionShape& shape,
                         KvCache& cache, int layer, float* out) = 0;
  // For i < n with src[i] >= 0 and src[i] != dst[i], in order: every layer's and kv head's
  // cache entry (slot[i], src[i]) is copied to (slot[i], dst[i]) (accepted tree nodes move to
  // their positions).
  virtual void kv_copy(KvCache& cache, const int32_t* slot, const int32_t* src, const int32_t* dst,
                       int n) = 0;
  // Entries [0, n) of every layer and kv head of slot src_slot copied to slot dst_slot (a
  // prompt prefix shared by another sequence). Host arguments; queued in order with the ops.
  virtual void kv_copy_prefix(KvCache& cache, int src_slot, int dst_slot, int n) = 0;
  // out [n, ffn] = silu(gate_up[:, :ffn]) * gate_up[:, ffn:]     (gate_up [n, 2 ffn])
  virtual void swiglu(const float* gate_up, int n, int ffn, float* out) = 0;
  // x [count] += y [count]
  virtual void add(float* x, const float* y, size_t count) = 0;
  // dst [n, dim] = src rows rows[i]
  virtual void gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst) = 0;
  // out [n, width]: out[i, c] = src[i, index[c]] where index[c] >= 0, else -inf (src [n,
  // src_cols], index [width] with entries in [-1, src_cols)): a reduced output head's logits
  // spread over the whole vocabulary, where no sampling rule draws the tokens it lacks.
  virtual void expand_columns(const float* src, int src_cols, const int32_t* index, int n,
                              int width, float* out) = 0;
  // out_tokens[i] = a token drawn from logits [n, vocab] row i by the rule in sampling.h, with
  // the state of slot[i] (its params; step counter used then advanced by one).
  virtual void sample(const float* logits, int n, int vocab, const int32_t* slot,
                      SamplingState* states, int32_t* out_tokens) = 0;
  // Log-probabilities (sampling.h) of n entries: entry i reads logits row rows[i] of
  // [*, vocab] with the params of states[slot[i]] and writes out [i, kLogprobEntries]: token
  // tokens[i]'s, then the top `logprobs` candidates (id -1 past them). Entries with rows[i] < 0
  // or logprobs < 0 are skipped (their output left as it is).
  virtual void logprobs(const float* logits, int vocab, int n, const int32_t* rows,
                        const int32_t* tokens, const int32_t* slot, const SamplingState* states,
                        TokenLogprob* out) = 0;

  // ---- Fused ops: the five steps of a transformer layer and the output head (model.cpp) ------
  // Each defaults to the primitive ops above (backend.cpp); a backend that pays per launch (CUDA)
  // overrides them with one kernel each. `tmp` arguments are scratch [n, cols] the defaults use.

  // out [n, w.rows] = rmsnorm(x row r_i) @ W^T (+ bias), r_i = in_rows[i] (in_rows null: i).
  virtual void norm_linear(const float* x, const int32_t* in_rows, WeightView norm, float eps,
                           WeightView w, WeightView bias, int n, float* out, float* tmp);
  // qkv [n, (n_heads + 2 n_kv_heads) head_dim] = rope(rmsnorm(x) @ Wqkv^T + bias) (rope as in
  // rope()), and each row's k and v into the cache at (slot[i], layer, :, kv_idx[i]).
  virtual void qkv_projection(const float* x, WeightView norm, float eps, WeightView w,
                              WeightView bias, const Rows& rows, int n, const AttentionShape& shape,
                              const float* cos_table, const float* sin_table, KvCache& cache,
                              int layer, float* qkv, float* tmp);
  // x [n, w.rows] += in [n, w.cols] @ W^T     (tmp [n, w.rows])
  virtual void linear_residual(WeightView w, const float* in, int n, float* x, float* tmp);
  // x [n, w.rows] += swiglu(gate_up [n, 2 w.cols]) @ W^T     (act [n, w.cols], tmp [n, w.rows])
  virtual void swiglu_linear_residual(WeightView w, const float* gate_up, int n, float* x,
                                      float* act, float* tmp);

  // ---- timing -------------------------------------------------------------------------------
  // Device time of a span of the backend's work: start() and stop() record points on the
  // backend's stream, after the ops issued so far (never inside a capture: around graph
  // launches), and seconds() is the time between them. seconds() is meant to be read after a
  // synchronisation that followed stop() (download(), synchronize(): the iteration's read-back),
  // so timing adds none; read earlier, it waits for the stop point.
  class Timer {
   public:
    virtual ~Timer() = default;
    virtual void start() = 0;
    virtual void stop() = 0;
    virtual double seconds() = 0;
  };
  // A new timer. The default (backends whose ops run in order on the calling thread, the CPU)
  // reads the host clock; CUDA records a pair of events. Keep and reuse timers: one may hold
  // device resources.
  virtual std::unique_ptr<Timer> timer();
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
