// emu_attention.cpp: the CUDA attention and KV cache kernels (cpp/kernels/cuda/attention.cuh)
// compiled as host code against cuda_emu.h, behind a C interface for
// tests/test_cuda_emulated_attention.py (ctypes), on host memory. Every call goes through the
// header's own plan and launch functions, as CudaBackend does.
//
// The shared library target emu_attention of CMakeLists.txt (TRT_SPEC_BUILD_TESTS=ON).
#include <cstddef>
#include <stdexcept>

#include "kernels/cuda/attention_launch.cuh"

using namespace trt_spec;
using namespace trt_spec::cuda;

namespace {

KvView kv_view(void* k, void* v, int type, int layers, int nkv, int max_seq, int hd) {
  return KvView{k, v, static_cast<KvType>(type), layers, nkv, max_seq, hd};
}

RowsView rows_view(const int32_t* pos, const int32_t* slot, const int32_t* kv_idx,
                   const int32_t* tree_base, const uint64_t* tree_bits) {
  return RowsView{pos, slot, kv_idx, tree_bits ? tree_base : nullptr, tree_bits};
}

}  // namespace

extern "C" {

// info[0..8) = hd_class, tile_rows, head_chunk, chunk, splits, grid.x, grid.y, smem bytes;
// info[8] = partial floats, info[9] = counters. Returns 0, or -1 when the plan throws.
int emu_attention_plan(int n, int nh, int nkv, int hd, int max_seq, int sm_count, int64_t* info) {
  try {
    const AttentionPlan p = plan_attention(n, nh, nkv, hd, max_seq, sm_count);
    const int64_t v[10] = {p.hd_class,
                           p.tile_rows,
                           p.head_chunk,
                           p.chunk,
                           p.splits,
                           p.grid.x,
                           p.grid.y,
                           static_cast<int64_t>(p.smem_bytes),
                           static_cast<int64_t>(p.partial_bytes / sizeof(float)),
                           static_cast<int64_t>(p.counter_bytes / sizeof(unsigned))};
    for (int i = 0; i < 10; ++i) info[i] = v[i];
    return 0;
  } catch (const std::invalid_argument&) {
    return -1;
  }
}

// Backend::kv_write: k, v the cache [slots, layers, nkv, max_seq, hd] of KvType `type`.
void emu_kv_write(const float* qkv, const int32_t* pos, const int32_t* slot, const int32_t* kv_idx,
                  int n, int nh, int nkv, int hd, int type, void* k, void* v, int layers,
                  int max_seq, int layer) {
  launch_kv_write(nullptr, qkv, rows_view(pos, slot, kv_idx, nullptr, nullptr), n, nh,
                  kv_view(k, v, type, layers, nkv, max_seq, hd), layer);
}

// Backend::attention (reads the cache only) on blocks of `warps` warps (4 or 8); one_row: a
// one-row launch without tree bits on the decode instance (CudaBackend::set_attention_one_row).
// partial / counters: the plan's scratch (counters zero; left zero). kv_idx, tree_base,
// tree_bits: null or [n] (backend.h Rows).
void emu_attention(const float* qkv, const int32_t* pos, const int32_t* slot, const int32_t* kv_idx,
                   const int32_t* tree_base, const uint64_t* tree_bits, int n, int nh, int nkv,
                   int hd, float scale, int type, void* k, void* v, int layers, int max_seq,
                   int layer, int sm_count, int warps, int one_row, float* partial,
                   unsigned* counters, float* out) {
  const AttentionPlan p = plan_attention(n, nh, nkv, hd, max_seq, sm_count, true, warps);
  launch_attention(nullptr, p, qkv, rows_view(pos, slot, kv_idx, tree_base, tree_bits), n, nh,
                   scale, kv_view(k, v, type, layers, nkv, max_seq, hd), layer, out, partial,
                   counters, false, {}, one_row != 0);
}

void emu_kv_copy(void* k, void* v, int type, int layers, int nkv, int max_seq, int hd,
                 const int32_t* slot, const int32_t* src, const int32_t* dst, int n) {
  launch_kv_copy(nullptr, kv_view(k, v, type, layers, nkv, max_seq, hd), slot, src, dst, n);
}

}  // extern "C"
