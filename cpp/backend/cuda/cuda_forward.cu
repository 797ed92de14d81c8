// cuda_forward.cu: CudaBackend's persistent forward (cuda_backend.h): between begin_forward and
// end_forward the ops of a model forward of at most 16 rows are held as FwdOps
// (kernels/cuda/forward_program.cuh) instead of launched, and end_forward runs them as ONE launch
// of persistent_forward_kernel, after the static check.
//
// A program lives in device memory: [ops | instructions | waits | counters]. Outside capture every
// forward rewrites one buffer in stream order (the counters are zero again at the end of every
// launch). A graph capture may neither allocate nor copy, so capture()'s
// sizing pass (whose scratch pointers are null) allocates each forward's program, the capture
// pass launches with it, and the bytes are copied once the capture has ended.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/errors.h"
#include "kernels/cuda/forward_build.cuh"

namespace trt_spec {

struct CudaBackend::HeldOps {
  std::vector<cuda::FwdOp> ops;
};

void CudaBackend::HeldOpsDelete::operator()(HeldOps* h) const {
  delete h;
}

cuda::FwdProgramView CudaBackend::program_view(const Program& p, int prefetch) {
  auto* b = static_cast<uint8_t*>(p.mem);
  return cuda::FwdProgramView{reinterpret_cast<const cuda::FwdOp*>(b + p.off[0]),
                              reinterpret_cast<const cuda::FwdInstr*>(b + p.off[1]),
                              reinterpret_cast<const cuda::FwdWait*>(b + p.off[2]),
                              reinterpret_cast<int*>(b + align_up(p.blob_bytes, 64)),
                              p.n_instrs,
                              p.n_counters,
                              prefetch};
}

namespace {

// The program's arrays at 64-byte aligned offsets.
std::vector<uint8_t> program_bytes(const cuda::FwdProgram& p, size_t off[3]) {
  const size_t sizes[3] = {p.ops.size() * sizeof(cuda::FwdOp),
                           p.instrs.size() * sizeof(cuda::FwdInstr),
                           p.waits.size() * sizeof(cuda::FwdWait)};
  const void* src[3] = {p.ops.data(), p.instrs.data(), p.waits.data()};
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    off[i] = at;
    at = align_up(at + sizes[i], 64);
  }
  std::vector<uint8_t> b(at, 0);
  for (int i = 0; i < 3; ++i)
    if (sizes[i]) std::memcpy(b.data() + off[i], src[i], sizes[i]);
  return b;
}

}  // namespace

bool CudaBackend::set_persistent(bool on) {
  persistent_ = on && (planning_ || cc_major_ >= 9);
  return persistent_;
}

bool cuda_set_persistent(Backend& be, bool on) {
  return on_cuda(be, false, [&](CudaBackend& c) { return c.set_persistent(on); });
}

void CudaBackend::begin_forward(int n) {
  if (!held_) held_.reset(new HeldOps);
  held_->ops.clear();
  holding_ = persistent_ && n >= 1 && n <= 16;
  held_rows_ = n;
}

void CudaBackend::end_forward(bool run) {
  if (run) {
    flush_forward();
    return;
  }
  if (held_) held_->ops.clear();
  holding_ = false;
}

bool CudaBackend::hold(const cuda::FwdOp& op) {
  if (!holding_) return false;
  held_->ops.push_back(op);
  return true;
}

bool CudaBackend::hold_matmul(const cuda::MatmulArgs& a, const cuda::MatmulPlan& p, float* partial,
                              int* counters) {
  return holding_ && hold(cuda::fwd_matmul_op(a, p, partial, counters));
}

bool CudaBackend::hold_attention(const cuda::AttentionPlan& p, const float* qkv,
                                 const cuda::RowsView& rows, int n, int n_heads, float scale,
                                 const cuda::KvView& kv, int layer, float* out, float* partial,
                                 unsigned* counters) {
  if (!holding_) return false;
  if (!cuda::fwd_holds_attention(p)) {
    flush_forward();  // an attention it does not run
    return false;
  }
  return hold(
      cuda::fwd_attention_op(p, qkv, rows, n, n_heads, scale, kv, layer, out, partial, counters));
}

bool CudaBackend::hold_embed(const cuda::DevWeight& table, const int32_t* tokens, int n,
                             float* out) {
  return holding_ && hold(cuda::fwd_embed_op(table, tokens, n, out));
}

bool CudaBackend::hold_gather(const float* src, const int32_t* rows, int n, int dim, float* out) {
  return holding_ && hold(cuda::fwd_gather_op(src, rows, n, dim, out));
}

int64_t CudaBackend::resident_blocks(int tile) {
  int64_t& r = resident_[tile == 1 ? 0 : 1];
  if (r > 0) return r;
  int per_sm = cuda::fwd_blocks_per_sm(tile);
  if (!planning_) {
    use_device();
    const cudaError_t e =
        tile == 1 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                        &per_sm, cuda::persistent_forward_kernel<1>, cuda::kMatmulThreads, 0)
                  : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                        &per_sm, cuda::persistent_forward_kernel<8>, cuda::kMatmulThreads, 0);
    cuda_check(e, "persistent forward: occupancy");
  }
  if (per_sm < 1) throw Error("persistent forward: the kernel fits no SM");
  r = static_cast<int64_t>(per_sm) * sm_count_;
  return r;
}

CudaBackend::Program* CudaBackend::new_program(size_t blob_bytes, int n_counters) {
  auto p = std::make_unique<Program>();
  p->blob_bytes = blob_bytes;
  p->n_counters = n_counters;
  p->mem = alloc(align_up(blob_bytes, 64) + sizeof(int) * std::max(n_counters, 1));  // zeroed
  programs_.push_back(std::move(p));
  return programs_.back().get();
}

void CudaBackend::upload_captured_programs() {
  for (auto& [program, bytes] : uploads_)
    cuda_check(cudaMemcpy(program->mem, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
               "persistent forward: program upload");
  uploads_.clear();
}

void CudaBackend::flush_forward() {
  holding_ = false;
  if (!held_ || held_->ops.empty()) return;
  std::vector<cuda::FwdOp> ops;
  ops.swap(held_->ops);
  const int tile = cuda::fwd_tile(held_rows_);
  const cuda::FwdProgram prog = cuda::build_forward_program(std::move(ops));
  const int64_t resident = resident_blocks(tile);
  const int64_t grid = std::min<int64_t>(resident, static_cast<int64_t>(prog.instrs.size()));
  const std::string why = cuda::check_forward_program(prog, grid, resident);
  if (!why.empty()) throw Error(why);
  size_t off[3];
  std::vector<uint8_t> bytes = program_bytes(prog, off);
  Program* p = nullptr;
  if (sizing_) {  // capture(): the program the capture pass will launch; nothing runs now
    sized_programs_.push_back(new_program(bytes.size(), prog.n_counters));
    return;
  }
  if (capturing_ && !planning_) {
    if (next_sized_ >= sized_programs_.size() ||
        sized_programs_[next_sized_]->blob_bytes != bytes.size() ||
        sized_programs_[next_sized_]->n_counters != prog.n_counters)
      throw Error("persistent forward: the capture differs from its sizing pass");
    p = sized_programs_[next_sized_++];
    uploads_.emplace_back(p, std::move(bytes));
  } else {  // one buffer for every forward outside a graph, rewritten in stream order
    if (!eager_ || eager_->blob_bytes < bytes.size() || eager_->n_counters < prog.n_counters)
      eager_ = new_program(std::max(bytes.size(), eager_ ? 2 * eager_->blob_bytes : 0),
                           std::max(prog.n_counters, eager_ ? 2 * eager_->n_counters : 0));
    p = eager_;
    upload(p->mem, bytes.data(), bytes.size());
  }
  std::copy(off, off + 3, p->off);
  p->n_instrs = static_cast<int>(prog.instrs.size());
  cuda::launch_forward_program(stream_, program_view(*p, prefetch_), tile, grid);
  check_launch("persistent forward");
}

}  // namespace trt_spec
