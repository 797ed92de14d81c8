// cuda_backend.cu: CudaBackend (cuda_backend.h): device, memory, graphs and the per-row
// transformer ops; plus the device queries of cuda_api.h. Matrix products (and the fused layer
// ops built on them) are in cuda_matmul.cu, token selection in cuda_sampling.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/errors.h"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/l2_prefetch.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/random_fill.cuh"

namespace trt_spec {

namespace {

constexpr size_t kPinnedBytes = size_t{8} << 20;  // download() staging; larger copies go in parts

// A byte-count switch: unset 0, "1" the default `one`, N > 1 N bytes.
int64_t env_bytes(const char* name, int64_t one) {
  const char* v = std::getenv(name);
  const int64_t n = v ? std::atoll(v) : 0;
  return n == 1 ? one : n;
}

// A number switch: its value, or `unset`.
int env_int(const char* name, int unset) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : unset;
}

// An on/off switch: "1" on, "0" off, unset (or anything else) `unset`.
bool env_on(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (v && std::string(v) == "1") return true;
  if (v && std::string(v) == "0") return false;
  return unset;
}

// Planning mode: a graph is the list of launches its capture recorded.
class PlanGraph final : public BackendGraph {
 public:
  PlanGraph(std::vector<std::string> launches, std::vector<std::string>* record)
      : launches_(std::move(launches)), record_(record) {}
  void launch() override { record_->insert(record_->end(), launches_.begin(), launches_.end()); }

 private:
  std::vector<std::string> launches_;
  std::vector<std::string>* record_;
};

class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, int device)
      : exec_(exec), stream_(stream), device_(device) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void launch() override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_)
      cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  int device_;
};

}  // namespace

// ---- device queries (cuda_api.h) --------------------------------------------------------------

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    if (why) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found";
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

CudaDeviceInfo cuda_device_info(int device) {
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  CudaDeviceInfo info;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
    info.peak_bandwidth_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9;  // DDR
  cudaGetLastError();
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cuda_check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  return info;
}

double cuda_copy_bandwidth_gbps(int device, size_t bytes, int iters) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  void *a = nullptr, *b = nullptr;
  cuda_check(cudaMalloc(&a, bytes), "cudaMalloc");
  if (cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    throw Error("cudaMalloc failed for the bandwidth buffer");
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double best = 0.0;
  cudaMemset(a, 1, bytes);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  for (int i = 0; i < std::max(1, iters); ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms > 0.0f) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  cuda_check(cudaGetLastError(), "bandwidth measurement");
  return best;
}

// ---- construction, memory ---------------------------------------------------------------------

class CudaBackend::Recorder final : public cuda::LaunchRecorder {
 public:
  void record(const char* kernel, dim3, dim3, size_t) override {
    std::string name(kernel);  // the name as launched, without its namespace
    const size_t colons = name.rfind("::");
    launches.push_back(colons == std::string::npos ? name : name.substr(colons + 2));
  }
  std::vector<std::string> launches;
  cuda::LaunchRecorder* previous = nullptr;
};

CudaBackend::CudaBackend(PlanTag, int sm_count) : planning_(true), device_(-1) {
  if (sm_count < 1) throw InvalidArgument("planning: sm_count must be >= 1");
  sm_count_ = sm_count;
  name_ = "cuda plan (" + std::to_string(sm_count) + " SMs, nothing runs)";
  recorder_ = std::make_unique<Recorder>();
  recorder_->previous = cuda::launch_recorder();
  cuda::launch_recorder() = recorder_.get();
}

std::unique_ptr<CudaBackend> CudaBackend::planning(int sm_count) {
  return std::unique_ptr<CudaBackend>(new CudaBackend(PlanTag{}, sm_count));
}

const std::vector<std::string>& CudaBackend::launches() const {
  if (!planning_) throw Error("launches() is for a planning backend");
  return recorder_->launches;
}

void CudaBackend::clear_launches() {
  if (planning_) recorder_->launches.clear();
}

CudaBackend::CudaBackend(int device) : device_(device) {
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0) throw Error("no CUDA device is available (" + why + ")");
  if (device < 0 || device >= count)
    throw InvalidArgument("CUDA device " + std::to_string(device) +
                          " does not exist (this machine has " + std::to_string(count) + ")");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  if (prop.major < 8)
    throw Error(std::string("the CUDA backend needs compute capability 8.0 or newer; ") +
                prop.name + " has " + std::to_string(prop.major) + "." +
                std::to_string(prop.minor));
  sm_count_ = prop.multiProcessorCount;
  name_ = "cuda:" + std::to_string(device_) + " " + prop.name;
  cc_major_ = prop.major;
  // On by default (sm_90+; TRT_SPEC_CUDA_PDL=0 turns it off): the same bits either way
  // (test_pdl_changes_no_bits); its measured gain: benchmarks/results/HISTORY.md.
  set_pdl(env_on("TRT_SPEC_CUDA_PDL", true));
  set_imma_rows(env_int("TRT_SPEC_CUDA_IMMA_ROWS", 0));
  one_wave_ = env_on("TRT_SPEC_CUDA_ONE_WAVE", true);
  set_persistent(env_on("TRT_SPEC_CUDA_PERSISTENT", false));
  set_attention_warps(env_int("TRT_SPEC_CUDA_ATTN_WARPS", cuda::kAttnWarps));
  set_attention_one_row(env_on("TRT_SPEC_CUDA_ATTN_ONE_ROW", false));
  set_repeat_attention(env_int("TRT_SPEC_CUDA_REPEAT_ATTENTION", 1));
  set_repeat_qkv(env_int("TRT_SPEC_CUDA_REPEAT_QKV", 1));
  set_prefetch_next(env_bytes("TRT_SPEC_CUDA_PREFETCH_NEXT", cuda::kPrefetchNextBytes));
  set_prefetch(static_cast<int>(env_bytes("TRT_SPEC_CUDA_PREFETCH", cuda::kPrefetchBlockBytes)));
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  cuda_check(cudaMallocHost(&pinned_, kPinnedBytes), "cudaMallocHost");
}

bool CudaBackend::set_pdl(bool on) {
  pdl_ = on && cc_major_ >= 9;
  return pdl_;
}

KernelWave cuda_plan_attention_wave(int n, int n_heads, int n_kv_heads, int head_dim, int max_seq,
                                    int sm_count) {
  cuda::AttentionPlan p;
  try {
    p = cuda::plan_attention(n, n_heads, n_kv_heads, head_dim, max_seq, sm_count);
  } catch (const std::invalid_argument& e) {
    throw InvalidArgument(e.what());
  }
  KernelWave w;
  w.kernel = "attention_kernel<" + std::to_string(p.hd_class) + ">";
  w.blocks = static_cast<int64_t>(p.grid.x) * p.grid.y * p.grid.z;
  w.blocks_per_sm = cuda::attn_blocks_per_sm(p.warps);
  w.sm_count = sm_count;
  return w;
}

bool cuda_set_pdl(Backend& be, bool on) {
  return on_cuda(be, false, [&](CudaBackend& c) { return c.set_pdl(on); });
}

int cuda_set_attention_warps(Backend& be, int warps) {
  return on_cuda(be, -1, [&](CudaBackend& c) { return c.set_attention_warps(warps); });
}

bool cuda_set_attention_one_row(Backend& be, bool on) {
  return on_cuda(be, false, [&](CudaBackend& c) { return c.set_attention_one_row(on); });
}

int cuda_set_repeat_attention(Backend& be, int times) {
  return on_cuda(be, -1, [&](CudaBackend& c) { return c.set_repeat_attention(times); });
}

int cuda_set_repeat_qkv(Backend& be, int times) {
  return on_cuda(be, -1, [&](CudaBackend& c) { return c.set_repeat_qkv(times); });
}

int64_t cuda_set_prefetch_next(Backend& be, int64_t bytes) {
  return on_cuda(be, int64_t{-1}, [&](CudaBackend& c) { return c.set_prefetch_next(bytes); });
}

int cuda_set_prefetch(Backend& be, int bytes) {
  return on_cuda(be, -1, [&](CudaBackend& c) { return c.set_prefetch(bytes); });
}

bool cuda_set_one_wave(Backend& be, bool on) {
  return on_cuda(be, false, [&](CudaBackend& c) {
    c.set_one_wave(on);
    return true;
  });
}

CudaBackend::~CudaBackend() {
  if (planning_) {
    for (Scratch& s : scratch_) std::free(s.p);
    for (void* p : retired_) std::free(p);
    for (auto& p : programs_) std::free(p->mem);
    if (cuda::launch_recorder() == recorder_.get()) cuda::launch_recorder() = recorder_->previous;
    return;
  }
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  for (void* p : weights_) cudaFree(p);
  for (Scratch& s : scratch_) cudaFree(s.p);
  for (void* p : retired_) cudaFree(p);
  for (auto& p : programs_) cudaFree(p->mem);
  cudaFreeHost(pinned_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::use_device() const {
  if (planning_) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_)
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::check_launch(const char* what) const {
  if (planning_) return;
  cuda_check(cudaGetLastError(), what);
}

void* CudaBackend::alloc(size_t bytes) {
  use_device();
  void* p = nullptr;
  const size_t n = align_up(bytes == 0 ? 64 : bytes, 64);
  if (planning_) {  // zeroed pages, committed only where written (a KV cache stays untouched)
    p = std::calloc(1, n);
    if (!p) throw Error("out of host memory planning an allocation of " + std::to_string(bytes));
    return p;
  }
  const cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("out of GPU memory allocating " + std::to_string(bytes) + " bytes (" +
                cudaGetErrorString(e) + ")");
  }
  cuda_check(cudaMemsetAsync(p, 0, n, stream_), "cudaMemsetAsync");
  return p;
}

void CudaBackend::release(void* p) {
  if (!p) return;
  if (planning_) return std::free(p);
  cudaSetDevice(device_);
  cudaFree(p);  // (waits for the device; never throws: called from destructors)
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  if (planning_) {
    std::memcpy(dst, src, bytes);
    return;
  }
  use_device();
  // Pageable source: the copy is staged before the call returns, so src may change afterwards.
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  if (planning_) {
    std::memcpy(dst, src, bytes);
    return;
  }
  use_device();
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  // Through pinned memory: one DMA copy and one synchronisation per kPinnedBytes.
  size_t off = 0;
  do {
    const size_t n = std::min(kPinnedBytes, bytes - off);
    if (n > 0)
      cuda_check(cudaMemcpyAsync(pinned_, in + off, n, cudaMemcpyDeviceToHost, stream_),
                 "download");
    cuda_check(cudaStreamSynchronize(stream_), "download (synchronize)");
    if (n > 0) std::memcpy(out + off, pinned_, n);
    off += n;
  } while (off < bytes);
}

void CudaBackend::synchronize() {
  if (planning_) return;
  use_device();
  cuda_check(cudaStreamSynchronize(stream_), "synchronize");
}

void* CudaBackend::weight_memory(size_t bytes) {
  use_device();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("out of GPU memory loading the weights (" + std::to_string(bytes) +
                " more bytes; " + cudaGetErrorString(e) + ")");
  }
  weights_.push_back(p);
  return p;
}

WeightView CudaBackend::import_weight(const WeightView& host) {
  if (planning_) return host;  // (never read: nothing runs)
  const size_t bytes = weight_blob_bytes(host.type, host.rows, host.cols);
  void* p = weight_memory(bytes);
  cuda_check(cudaMemcpyAsync(p, host.data, bytes, cudaMemcpyHostToDevice, stream_),
             "import_weight");
  cuda_check(cudaStreamSynchronize(stream_), "import_weight (synchronize)");
  WeightView v = host;
  v.data = static_cast<const uint8_t*>(p);
  return v;
}

WeightView CudaBackend::random_weight(WeightType t, int64_t rows, int64_t cols,
                                      const RandomFill& fill, bool /*matmul*/) {
  WeightView v{t, rows, cols, nullptr};
  if (planning_) return v;  // (never read: nothing runs)
  void* p = weight_memory(weight_blob_bytes(t, rows, cols));
  cuda::launch_random_fill(stream_, t, rows, cols, fill, static_cast<uint8_t*>(p));
  check_launch("random_fill");
  cuda_check(cudaStreamSynchronize(stream_), "random_weight (synchronize)");
  v.data = static_cast<const uint8_t*>(p);
  return v;
}

// ---- scratch and graphs -----------------------------------------------------------------------

void CudaBackend::grow(Scratch& s, size_t bytes) {
  if (s.p) retired_.push_back(s.p);
  s.p = nullptr;
  s.bytes = 0;
  const size_t n = align_up(bytes, 256);
  if (planning_) {
    s.p = std::calloc(1, n);
    if (!s.p) throw Error("out of host memory planning " + std::to_string(n) + " bytes of scratch");
    s.bytes = n;
    return;
  }
  const cudaError_t e = cudaMalloc(&s.p, n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    s.p = nullptr;
    throw Error("out of GPU memory allocating " + std::to_string(n) + " bytes of scratch");
  }
  s.bytes = n;
  // Zero, in stream order (grow never runs while capturing): the counters of the multi-block
  // kernels (attention splits, sampling rows, split-K matmuls) must start at 0.
  cuda_check(cudaMemsetAsync(s.p, 0, n, stream_), "cudaMemsetAsync");
}

void* CudaBackend::scratch(ScratchId id, size_t bytes) {
  Scratch& s = scratch_[id];
  if (bytes <= s.bytes) return s.p;
  if (sizing_) {
    s.need = std::max(s.need, bytes);
    return nullptr;
  }
  if (capturing_) throw Error("CUDA backend: a scratch buffer outgrew its sizing pass");
  use_device();
  grow(s, std::max({bytes, s.need, s.bytes + s.bytes / 2}));
  return s.p;
}

std::unique_ptr<BackendGraph> CudaBackend::capture(const std::function<void()>& issue_ops) {
  use_device();
  sized_programs_.clear();  // (cuda_forward.cu: the persistent forwards' programs)
  uploads_.clear();
  next_sized_ = 0;
  sized_weights_.clear();  // (hint_after: the matmuls' weights in issue order)
  weight_cursor_ = 0;
  // 1. Sizing pass: the ops record the scratch they need and launch nothing.
  sizing_ = true;
  try {
    issue_ops();
  } catch (...) {
    sizing_ = false;
    throw;
  }
  sizing_ = false;
  for (Scratch& s : scratch_)
    if (s.need > s.bytes) grow(s, s.need);
  if (planning_) {  // 2'. Record the launches of one issue.
    std::vector<std::string> before;
    before.swap(recorder_->launches);
    capturing_ = true;
    try {
      issue_ops();
    } catch (...) {
      capturing_ = false;
      recorder_->launches.swap(before);
      throw;
    }
    capturing_ = false;
    std::vector<std::string> graph;
    graph.swap(recorder_->launches);
    recorder_->launches.swap(before);
    return std::make_unique<PlanGraph>(std::move(graph), &recorder_->launches);
  }
  // 2. Capture.
  cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
             "cudaStreamBeginCapture");
  capturing_ = true;
  cudaGraph_t graph = nullptr;
  try {
    issue_ops();
  } catch (...) {
    capturing_ = false;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  capturing_ = false;
  cuda_check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda_check(e, "cudaGraphInstantiate");
  upload_captured_programs();  // which the capture could not copy
  return std::make_unique<CudaGraph>(exec, stream_, device_);
}

// ---- transformer ops --------------------------------------------------------------------------

void CudaBackend::embed(WeightView table, const int32_t* tokens, int n, float* out) {
  if (n > 0 && hold_embed(cuda::dev_weight(table), tokens, n, out)) return;
  if (sizing() || n <= 0) return;
  cuda::launch_embed(stream_, cuda::dev_weight(table), tokens, n, out);
  check_launch("embed");
}

void CudaBackend::rmsnorm(const float* x, WeightView w, float eps, int n, int dim, float* out) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_rmsnorm(stream_, x, static_cast<const float*>(w.section(0)), eps, n, dim, out);
  check_launch("rmsnorm");
}

void CudaBackend::rope(float* qkv, const int32_t* pos, int n, const AttentionShape& s,
                       const float* cos_table, const float* sin_table) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_rope(stream_, qkv, pos, n, s.n_heads, s.n_kv_heads, s.head_dim, cos_table,
                    sin_table);
  check_launch("rope");
}

namespace {

cuda::KvView kv_view(const KvCache& c) {
  return cuda::KvView{c.k, c.v, c.type, c.layers, c.kv_heads, c.max_seq, c.head_dim};
}

cuda::RowsView rows_view(const Rows& r) {
  return cuda::RowsView{r.pos, r.slot, r.kv_idx, r.tree_bits ? r.tree_base : nullptr, r.tree_bits};
}

}  // namespace

void CudaBackend::kv_write(const float* qkv, const Rows& rows, int n, const AttentionShape& s,
                           KvCache& cache, int layer) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_kv_write(stream_, qkv, rows_view(rows), n, s.n_heads, kv_view(cache), layer);
  check_launch("kv_write");
}

void CudaBackend::attention(const float* qkv, const Rows& rows, int n, const AttentionShape& s,
                            KvCache& cache, int layer, float* out) {
  const cuda::WeightHint next = hint_after(nullptr, 2);  // the o and gate / up weights
  // Tiles and splits from the shape, max_seq and the SM count (never n: a row's bits do not
  // depend on the batch); throws std::invalid_argument (ValueError) for unsupported shapes.
  const cuda::AttentionPlan p = cuda::plan_attention(
      n, s.n_heads, s.n_kv_heads, s.head_dim, cache.max_seq, sm_count_, one_wave_, attn_warps_);
  if (n <= 0) return;
  float* partial = nullptr;
  unsigned* counters = nullptr;
  if (p.partial_bytes) partial = static_cast<float*>(scratch(kAttnPartial, p.partial_bytes));
  if (p.counter_bytes) counters = static_cast<unsigned*>(scratch(kAttnCounters, p.counter_bytes));
  if (hold_attention(p, qkv, rows_view(rows), n, s.n_heads, s.scale, kv_view(cache), layer, out,
                     partial, counters))
    return;
  if (sizing()) return;
  for (int r = 0; r < repeat_attention_; ++r) {  // (set_repeat_attention: idempotent)
    cuda::launch_attention(stream_, p, qkv, rows_view(rows), n, s.n_heads, s.scale, kv_view(cache),
                           layer, out, partial, counters, pdl_, next, attn_one_row_);
    check_launch("attention");
  }
}

void CudaBackend::kv_copy(KvCache& cache, const int32_t* slot, const int32_t* src,
                          const int32_t* dst, int n) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_kv_copy(stream_, kv_view(cache), slot, src, dst, n);
  check_launch("kv_copy");
}

void CudaBackend::kv_copy_prefix(KvCache& cache, int src_slot, int dst_slot, int n) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0 || src_slot == dst_slot) return;
  use_device();
  // The slot's [layers, kv_heads] blocks of max_seq entries: one strided copy each for k and v.
  const size_t eb = cache.elem_bytes(), hd = cache.head_dim;
  const size_t pitch = static_cast<size_t>(cache.max_seq) * hd * eb, width = n * hd * eb;
  const size_t rows = static_cast<size_t>(cache.layers) * cache.kv_heads;
  const size_t to = cache.slot_layer_offset(dst_slot, 0) * eb;
  const size_t from = cache.slot_layer_offset(src_slot, 0) * eb;
  for (void* base : {cache.k, cache.v}) {
    auto* b = static_cast<uint8_t*>(base);
    cuda_check(cudaMemcpy2DAsync(b + to, pitch, b + from, pitch, width, rows,
                                 cudaMemcpyDeviceToDevice, stream_),
               "kv_copy_prefix");
  }
}

void CudaBackend::swiglu(const float* gate_up, int n, int ffn, float* out) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_swiglu(stream_, gate_up, n, ffn, out);
  check_launch("swiglu");
}

void CudaBackend::add(float* x, const float* y, size_t count) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || count == 0) return;
  cuda::launch_add(stream_, x, y, static_cast<int64_t>(count));
  check_launch("add");
}

void CudaBackend::expand_columns(const float* src, int src_cols, const int32_t* index, int n,
                                 int width, float* out) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  if (sizing() || n <= 0) return;
  cuda::launch_expand_columns(stream_, src, src_cols, index, n, width, out);
  check_launch("expand_columns");
}

void CudaBackend::gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst) {
  if (n > 0 && hold_gather(src, rows, n, dim, dst)) return;
  if (sizing() || n <= 0) return;
  cuda::launch_gather_rows(stream_, src, rows, n, dim, dst);
  check_launch("gather_rows");
}

}  // namespace trt_spec
