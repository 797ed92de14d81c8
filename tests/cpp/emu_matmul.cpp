// emu_matmul.cpp: the fused CUDA matmul (cpp/kernels/cuda/matmul.cuh) compiled as host code
// against cuda_emu.h, behind a C interface for tests/test_cuda_emulated_matmul.py (ctypes), on
// host memory. It calls plan_matmul and launch_matmul, the host code the CUDA backend runs.
//
// The shared library target emu_matmul of CMakeLists.txt (TRT_SPEC_BUILD_TESTS=ON).
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/matmul_launch.cuh"

using namespace trt_spec;
using namespace trt_spec::cuda;

extern "C" {

// The product's description: weight blob, activations, transform, epilogue, rope-kv fields.
struct EmuMatmul {
  int32_t type;
  int32_t n;
  int64_t rows, cols;
  const uint8_t* blob;
  const float* x;
  const int32_t* in_rows;
  int32_t in_mode, epi;
  const float* norm_w;
  float eps;
  int32_t n_heads;
  const float* bias;
  float* out;
  const int32_t* pos;
  const int32_t* slot;
  const int32_t* kv_idx;
  int32_t n_kv_heads, head_dim;
  const float* cos_t;
  const float* sin_t;
  void* k;
  void* v;
  int32_t kv_type, layers, max_seq, layer;
  int32_t imma_rows;     // plan_matmul's imma_rows (0: its default)
  int32_t legacy_waves;  // 1: plan_matmul's one_wave false (the earlier grids)
};

// Plans the product for sm_count SMs; info [10]: vectorized, splits, tile_rows, grid.x, grid.y,
// reps, split_units, partial_bytes, counter_bytes, imma. With run, then launches it (partial and
// counters: the scratch, capacities in bytes). Returns 0, -1 (scratch too small, not launched)
// or -2 (plan_matmul rejected the arguments).
int emu_matmul(const EmuMatmul* m, int sm_count, int run, float* partial, int64_t partial_cap,
               int* counters, int64_t counter_cap, int64_t* info) {
  MatmulArgs a;
  a.W = dev_weight(WeightView{static_cast<WeightType>(m->type), m->rows, m->cols, m->blob});
  a.x = m->x;
  a.in_rows = m->in_rows;
  a.n = m->n;
  a.in = static_cast<MatmulIn>(m->in_mode);
  a.norm_w = m->norm_w;
  a.eps = m->eps;
  a.bias = m->bias;
  a.epi = static_cast<MatmulOut>(m->epi);
  a.out = m->out;
  a.pos = m->pos;
  a.slot = m->slot;
  a.kv_idx = m->kv_idx;
  a.n_heads = m->n_heads;
  a.n_kv_heads = m->n_kv_heads;
  a.head_dim = m->head_dim;
  a.cos_t = m->cos_t;
  a.sin_t = m->sin_t;
  a.kv = KvView{m->k,       m->v,       static_cast<KvType>(m->kv_type), m->layers, m->n_kv_heads,
                m->max_seq, m->head_dim};
  a.layer = m->layer;
  MatmulPlan p;
  try {
    p = plan_matmul(a, sm_count, m->imma_rows > 0 ? m->imma_rows : kImmaRowsDefault,
                    m->legacy_waves == 0);
  } catch (const std::invalid_argument&) {
    return -2;
  }
  const int64_t v[10] = {p.vectorized,
                         p.splits,
                         p.tile_rows,
                         p.grid.x,
                         p.grid.y,
                         p.geom.reps,
                         p.geom.split_units,
                         static_cast<int64_t>(p.partial_bytes),
                         static_cast<int64_t>(p.counter_bytes),
                         p.imma};
  for (int i = 0; i < 10; ++i) info[i] = v[i];
  if (!run) return 0;
  if (static_cast<int64_t>(p.partial_bytes) > partial_cap ||
      static_cast<int64_t>(p.counter_bytes) > counter_cap)
    return -1;
  launch_matmul(nullptr, a, p, p.partial_bytes ? partial : nullptr,
                p.counter_bytes ? counters : nullptr);
  return 0;
}

}  // extern "C"
