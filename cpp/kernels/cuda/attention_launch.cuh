// attention_launch.cuh: launch_attention, exactly one launch of the attention kernel
// (attention.cuh) with the plan of plan_attention (attention_plan.cuh). The CUDA backend and the
// emulated tests (tests/cpp/emu_attention.cpp) call it. Including it instantiates the kernels.
#pragma once

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_plan.cuh"

namespace trt_spec::cuda {

// One kernel launch (n >= 1 rows; plan from plan_attention with this n). partial, counters:
// scratch of the plan's sizes (null when those are 0), counters zero (they are left zero).
// pdl: launched as a programmatic dependent (common.cuh), its launch and block scheduling
// overlap the qkv matmul's tail; the kernel reads nothing before grid_dependency_wait. next:
// weights its blocks stream toward L2 for the ops after it (l2_prefetch.cuh). one_row: a launch
// of one row without tree bits runs the decode instance (kOneRow: the same bits from less code;
// head_dim up to 128).
inline void launch_attention(cudaStream_t stream, const AttentionPlan& p, const float* qkv,
                             RowsView rows, int n, int n_heads, float scale, KvView kv, int layer,
                             float* out, float* partial, unsigned* counters, bool pdl = false,
                             const WeightHint& next = {}, bool one_row = false) {
  const AttnArgs a =
      attention_args(p, qkv, rows, n, n_heads, scale, kv, layer, out, partial, counters);
  if (one_row && n == 1 && !rows.tree_bits && p.hd_class <= 128) {
    const auto attention_kernel_1r =
        p.warps == 8
            ? (p.hd_class == 64 ? attention_kernel<64, 8, true> : attention_kernel<128, 8, true>)
            : (p.hd_class == 64 ? attention_kernel<64, 4, true> : attention_kernel<128, 4, true>);
    TRT_SPEC_LAUNCH_PDL(pdl, attention_kernel_1r, p.grid, p.block, stream, a, next);
    return;
  }
  if (p.warps == 8) {  // (the instance through a pointer: no comma inside the macro)
    const auto attention_kernel_8w = p.hd_class == 64    ? attention_kernel<64, 8>
                                     : p.hd_class == 128 ? attention_kernel<128, 8>
                                                         : attention_kernel<256, 8>;
    TRT_SPEC_LAUNCH_PDL(pdl, attention_kernel_8w, p.grid, p.block, stream, a, next);
    return;
  }
  switch (p.hd_class) {  // four warps: the default instances
    case 64:
      TRT_SPEC_LAUNCH_PDL(pdl, attention_kernel<64>, p.grid, p.block, stream, a, next);
      break;
    case 128:
      TRT_SPEC_LAUNCH_PDL(pdl, attention_kernel<128>, p.grid, p.block, stream, a, next);
      break;
    default:
      TRT_SPEC_LAUNCH_PDL(pdl, attention_kernel<256>, p.grid, p.block, stream, a, next);
      break;
  }
}

}  // namespace trt_spec::cuda
