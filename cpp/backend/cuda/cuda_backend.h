// cuda_backend.h: the CUDA implementation of Backend (backend.h).
//
// Device memory for everything (weights copied once by import_weight, KV caches, scratch, row
// metadata, sequence and sampling state), one non-blocking stream for every op, and graph
// capture of whole op sequences (one speculative iteration = one CUDA graph, spec/iteration.h).
// The kernels live in kernels/cuda/*.cuh; the ops are split over cuda_backend.cu (memory, graphs,
// transformer ops), cuda_matmul.cu (linear) and cuda_sampling.cu (token selection). The
// speculative iteration's own kernels (spec/spec_ops_cuda.cu) run on this backend's stream.
//
// Scratch buffers grow on demand. A graph keeps pointing at the buffers it was captured with,
// so an outgrown buffer is retired (kept until the backend goes), never freed early; capture()
// first issues the ops in a sizing pass that launches nothing, so no buffer grows while
// capturing.
//
// Planning mode (CudaBackend::planning): the same class and the same op code with no GPU at all:
// memory is host memory, nothing runs, and every kernel launch the ops would make is recorded
// (TRT_SPEC_LAUNCH, kernels/cuda/common.cuh). Graphs replay their recorded launches into the
// record. This is how `trt-spec info --plan` counts launches per step and per iteration.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

struct CUstream_st;

namespace trt_spec {

namespace cuda {
struct MatmulArgs;
struct MatmulPlan;
struct AttentionPlan;
struct RowsView;
struct KvView;
struct DevWeight;
struct FwdOp;
struct FwdProgramView;
struct WeightHint;
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  // A backend that plans for a device with sm_count SMs and runs nothing (see above). Its
  // launches are recorded while it lives, on the thread that made it.
  static std::unique_ptr<CudaBackend> planning(int sm_count);
  bool is_planning() const { return planning_; }
  // Planning mode: the kernel names of every launch so far (graph launches included).
  const std::vector<std::string>& launches() const;
  void clear_launches();

  std::string name() const override { return pdl_ ? name_ + " +pdl" : name_; }
  int threads() const override { return 1; }
  bool runs_on_host() const override { return false; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  WeightView import_weight(const WeightView& host) override;
  // Filled on the device (kernels/cuda/random_fill.cuh).
  WeightView random_weight(WeightType t, int64_t rows, int64_t cols, const RandomFill& fill,
                           bool matmul) override;

  bool supports_graphs() const override { return true; }
  std::unique_ptr<BackendGraph> capture(const std::function<void()>& issue_ops) override;

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
  // The persistent forward (cuda_forward.cu, kernels/cuda/forward_program.cuh): with it on, the
  // ops of a model forward of at most 16 rows run as one launch of persistent_forward_kernel.
  void begin_forward(int n) override;
  void end_forward(bool run) override;
  bool persistent() const { return persistent_; }
  // On (sm_90+, or a planning backend) or off for the forwards that follow; graphs captured
  // before keep their launches. Returns persistent(). Default: TRT_SPEC_CUDA_PERSISTENT=1 at
  // construction. The bits are those of the per-operation launches.
  bool set_persistent(bool on);
  // Fused layer ops (cuda_matmul.cu): one launch each.
  void norm_linear(const float* x, const int32_t* in_rows, WeightView norm, float eps, WeightView w,
                   WeightView bias, int n, float* out, float* tmp) override;
  void qkv_projection(const float* x, WeightView norm, float eps, WeightView w, WeightView bias,
                      const Rows& rows, int n, const AttentionShape& shape, const float* cos_table,
                      const float* sin_table, KvCache& cache, int layer, float* qkv,
                      float* tmp) override;
  void linear_residual(WeightView w, const float* in, int n, float* x, float* tmp) override;
  void swiglu_linear_residual(WeightView w, const float* gate_up, int n, float* x, float* act,
                              float* tmp) override;
  void sample(const float* logits, int n, int vocab, const int32_t* slot, SamplingState* states,
              int32_t* out_tokens) override;
  void logprobs(const float* logits, int vocab, int n, const int32_t* rows, const int32_t* tokens,
                const int32_t* slot, const SamplingState* states, TokenLogprob* out) override;
  std::unique_ptr<Timer> timer() override;  // cuda_timer.cu: a pair of events on the stream
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  // Whether the matmuls and attention launch as programmatic dependents (common.cuh:
  // TRT_SPEC_LAUNCH_PDL): on sm_90+ unless TRT_SPEC_CUDA_PDL=0 at construction
  // (benchmarks/bench_gpu.py compares both in one run). name() ends in " +pdl" while it is on.
  bool pdl() const { return pdl_; }
  // Turns it on (where the device is sm_90+) or off for the launches that follow; graphs
  // captured before keep their launches. Returns pdl().
  bool set_pdl(bool on);
  // The fewest rows of a q8 / q4 matmul that run matmul_imma_kernel (matmul_launch.cuh) for the
  // launches that follow (0: cuda::kImmaRowsDefault, prefill tiles; TRT_SPEC_CUDA_IMMA_ROWS at
  // construction): bench_gpu.py times verify rows and prefill chunks both ways in one process.
  // Every value gives the same bits. Returns the value in force.
  int set_imma_rows(int rows);
  // Whether decode and verify launches plan one wave (matmul_launch.cuh, attention.cuh; on
  // unless TRT_SPEC_CUDA_ONE_WAVE=0 at construction) for the launches that follow; off: the
  // earlier grids, which bench_gpu.py times against them in one process. Splits differ, so the
  // bits of split-K products differ between the two; within either, a row's bits never depend
  // on n.
  void set_one_wave(bool on) { one_wave_ = on; }
  // Bytes of its weights (at most) each matmul block streams toward L2 ahead of its use
  // (kernels/cuda/matmul_kernel.cuh matmul_prefetch): per operation before its grid dependency, in
  // the persistent forward an instruction ahead. 0: none (the default; TRT_SPEC_CUDA_PREFETCH=1 at
  // construction: cuda::kPrefetchBlockBytes, N > 1: N). For the launches and programs that follow;
  // graphs captured before keep theirs. The bits are the same either way. Returns the value in
  // force.
  int set_prefetch(int bytes) { return prefetch_ = bytes > 0 ? bytes : 0; }
  // Bytes (at most; 0: none, the default) of the next ops' weights each launch of a captured
  // graph streams toward L2 while it runs (kernels/cuda/l2_prefetch.cuh WeightHint: a matmul
  // the next matmul's, attention the next two; the capture's sizing pass knows the order).
  // TRT_SPEC_CUDA_PREFETCH_NEXT=1 at construction: cuda::kPrefetchNextBytes, N > 1: N. For
  // graphs captured from now on; launches outside graphs carry none. The same bits either way.
  // Returns the value in force.
  int64_t set_prefetch_next(int64_t bytes) { return prefetch_next_ = bytes > 0 ? bytes : 0; }
  // Warps per attention block for the launches that follow: 4 (the default) or 8 (a (row, head)
  // pair per warp for up to 8 pairs, half the resident blocks; TRT_SPEC_CUDA_ATTN_WARPS=8 at
  // construction); other values leave it. The same bits either way. Returns the value in force.
  int set_attention_warps(int warps) {
    if (warps == 4 || warps == 8) attn_warps_ = warps;
    return attn_warps_;
  }
  // Whether a one-row attention launch without tree bits (a batch-1 decode, a draft step) runs
  // the decode instance (attention.cuh kOneRow: the general kernel's code with the row count,
  // in-place tiles and element type known; 64 KiB of sm_90 code at head_dim 128 on 8 warps
  // against the general 117 KiB on 4) for the launches that follow; off by default
  // (TRT_SPEC_CUDA_ATTN_ONE_ROW=1 at construction). The same bits either way. Returns it.
  bool set_attention_one_row(bool on) { return attn_one_row_ = on; }
  // A measurement aid: each attention launch, and each qkv projection (the matmul with the RoPE
  // and KV-cache epilogue), issued `times` times in a row for the launches that follow (1: once,
  // the default; TRT_SPEC_CUDA_REPEAT_ATTENTION / _QKV at construction). Both are idempotent
  // (neither reads what it writes), so the bits are the same; a graph's time with a
  // launch repeated, less its time without, is what the launch costs warm (its code, data and
  // translations cached by the launch before it): bench_gpu.py's repeat arms. Per-operation
  // launches only. Return the value in force.
  int set_repeat_attention(int times) { return repeat_attention_ = times > 1 ? times : 1; }
  int set_repeat_qkv(int times) { return repeat_qkv_ = times > 1 ? times : 1; }
  CUstream_st* stream() const { return stream_; }
  // True during capture()'s sizing pass: ops (the spec layer's too) launch nothing.
  bool sizing() const { return sizing_; }
  // Makes this backend's device current on the calling thread.
  void use_device() const;
  // Throws Error when the last launch failed.
  void check_launch(const char* what) const;
  // Device memory for one weight, owned by the backend (weights_); throws when out of memory.
  void* weight_memory(size_t bytes);

 private:
  // Split partials and counters (zeroed when allocated, left zero) of the multi-block kernels.
  enum ScratchId {
    kAttnPartial = 0,
    kAttnCounters,
    kSampleRows,
    kLogprobRows,
    kMatmulPartial,
    kMatmulCounters,
    kScratchCount
  };
  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
    size_t need = 0;  // the most a sizing pass asked for
  };
  // A scratch buffer of at least `bytes`, zeroed when (re)allocated (the sampling rows' counters
  // must start at zero); nullptr during a sizing pass (which only records).
  void* scratch(ScratchId id, size_t bytes);
  void grow(Scratch& s, size_t bytes);
  // One fused matmul (kernels/cuda/matmul_launch.cuh) with its split-K scratch.
  void matmul(const cuda::MatmulArgs& args, const char* what);
  // Every matmul and attention calls it first, with its own weight (a matmul) or null: records
  // the weight in a sizing pass, counts it in a capture pass, and returns the hint of the next
  // n matmuls' weights for the launch (set_prefetch_next; none outside a capture).
  cuda::WeightHint hint_after(const cuda::DevWeight* own, int n);

  // The persistent forward: ops held since begin_forward, and the programs made of them (device
  // memory, kept while the backend lives: graphs point at them).
  struct Program {
    void* mem = nullptr;  // [ops | instructions | waits | counters], from alloc()
    size_t blob_bytes = 0;
    size_t off[3] = {0, 0, 0};  // of the ops, instructions and waits
    int n_counters = 0, n_instrs = 0;
  };
  static cuda::FwdProgramView program_view(const Program& p, int prefetch);
  // Each holds its op (true) while a forward is being held, else returns false (the caller
  // launches it); the arguments as the op's launch takes them.
  bool hold(const cuda::FwdOp& op);
  bool hold_matmul(const cuda::MatmulArgs& a, const cuda::MatmulPlan& p, float* partial,
                   int* counters);
  bool hold_attention(const cuda::AttentionPlan& p, const float* qkv, const cuda::RowsView& rows,
                      int n, int n_heads, float scale, const cuda::KvView& kv, int layer,
                      float* out, float* partial, unsigned* counters);
  bool hold_embed(const cuda::DevWeight& table, const int32_t* tokens, int n, float* out);
  bool hold_gather(const float* src, const int32_t* rows, int n, int dim, float* out);
  // Runs what is held as one persistent launch and stops holding (an op it cannot hold follows).
  void flush_forward();
  // Device memory for a program of blob_bytes (ops, instructions, waits) and n_counters counters
  // (zeroed), kept while the backend lives.
  Program* new_program(size_t blob_bytes, int n_counters);
  int64_t resident_blocks(int tile);
  // capture(): copies the programs of the captured forwards (uploads_), after the capture.
  void upload_captured_programs();

  struct PlanTag {};
  CudaBackend(PlanTag, int sm_count);
  class Recorder;

  bool planning_ = false;
  std::unique_ptr<Recorder> recorder_;  // planning mode: the launches so far
  int device_ = 0;
  int sm_count_ = 1;
  std::string name_;
  CUstream_st* stream_ = nullptr;
  std::vector<void*> weights_;  // imported weight copies
  Scratch scratch_[kScratchCount];
  std::vector<void*> retired_;  // outgrown scratch that captured graphs may still use
  void* pinned_ = nullptr;      // staging of download(), kPinnedBytes
  bool sizing_ = false, capturing_ = false;
  bool pdl_ = false;
  int imma_rows_ = 0;  // 0: plan_matmul's default
  bool one_wave_ = true;
  int prefetch_ = 0;           // bytes per matmul block (set_prefetch)
  int attn_warps_ = 4;         // set_attention_warps
  bool attn_one_row_ = false;  // set_attention_one_row
  int repeat_attention_ = 1;   // set_repeat_attention
  int repeat_qkv_ = 1;         // set_repeat_qkv
  int64_t prefetch_next_ = 0;  // set_prefetch_next
  // The matmul weights of a capture's sizing pass in issue order, and in its capture pass the
  // matmuls issued so far: where the next ops' weights are (hint_after).
  std::vector<cuda::DevWeight> sized_weights_;
  size_t weight_cursor_ = 0;
  int cc_major_ = 0;
  bool persistent_ = false, holding_ = false;
  int held_rows_ = 0;
  struct HeldOps;  // the ops held (cuda_forward.cu)
  struct HeldOpsDelete {
    void operator()(HeldOps* h) const;
  };
  std::unique_ptr<HeldOps, HeldOpsDelete> held_;
  std::vector<std::unique_ptr<Program>> programs_;
  Program* eager_ = nullptr;              // the forwards outside a graph
  int64_t resident_[2] = {0, 0};          // tiles 1 and 8
  std::vector<Program*> sized_programs_;  // capture(): made by the sizing pass, in order
  size_t next_sized_ = 0;
  std::vector<std::pair<Program*, std::vector<uint8_t>>> uploads_;  // after the capture ends
};

// call(c) where `be` is a CUDA backend c, else `other` (cuda_api.h's switches).
template <class R, class F>
R on_cuda(Backend& be, R other, F call) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  return c ? static_cast<R>(call(*c)) : other;
}

}  // namespace trt_spec
