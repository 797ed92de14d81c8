// matmul_launch.cuh: launch_matmul, exactly one kernel launch of the fused matmul (matmul.cuh)
// with the plan of plan_matmul (matmul_plan.cuh). The CUDA backend and the emulated tests
// (tests/cpp/emu_matmul.cpp) both call these. Including it instantiates every matmul kernel.
#pragma once

#include <stdexcept>

#include "kernels/cuda/matmul_imma.cuh"
#include "kernels/cuda/matmul_kernel.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace trt_spec::cuda {

template <WeightType T, int kTile>
inline void launch_matmul_tile(cudaStream_t stream, const MatmulArgs& a, const MatmulPlan& p,
                               float* partial, int* counters, bool pdl, int prefetch,
                               const WeightHint& next) {
  const auto matmul_tile_kernel = matmul_kernel<T, kTile>;  // (no comma inside the macro)
  TRT_SPEC_LAUNCH_PDL(pdl, matmul_tile_kernel, p.grid, p.block, stream, a, p.geom, partial,
                      counters, prefetch, next);
}

template <WeightType T>
inline void launch_matmul_typed(cudaStream_t stream, const MatmulArgs& a, const MatmulPlan& p,
                                float* partial, int* counters, bool pdl, int prefetch,
                                const WeightHint& next) {
  switch (p.tile_rows) {
    case 1: launch_matmul_tile<T, 1>(stream, a, p, partial, counters, pdl, prefetch, next); break;
    case 2: launch_matmul_tile<T, 2>(stream, a, p, partial, counters, pdl, prefetch, next); break;
    case 4: launch_matmul_tile<T, 4>(stream, a, p, partial, counters, pdl, prefetch, next); break;
    case 8: launch_matmul_tile<T, 8>(stream, a, p, partial, counters, pdl, prefetch, next); break;
    default:  // 16-row tiles: q8 / q4 on the tensor cores (p.imma), else dp4a / float
      if constexpr (matmul_quantized(T)) {
        if (!p.imma) {
          launch_matmul_tile<T, kMatmulMaxTile>(stream, a, p, partial, counters, pdl, prefetch,
                                                next);
          break;
        }
        const auto matmul_imma_tile_kernel = matmul_imma_kernel<T>;  // (no comma in the macro)
        TRT_SPEC_LAUNCH_PDL(pdl, matmul_imma_tile_kernel, p.grid, p.block, stream, a, p.geom,
                            partial, counters);
      } else {
        launch_matmul_tile<T, kMatmulMaxTile>(stream, a, p, partial, counters, pdl, prefetch, next);
      }
      break;
  }
}

// out = epilogue(f(x) @ W^T) with plan p (plan_matmul of the same args): one kernel launch.
// partial / counters: scratch of p.partial_bytes / p.counter_bytes (null when 0). pdl: launch
// matmul_kernel as a programmatic dependent (common.cuh: TRT_SPEC_LAUNCH_PDL), so that its
// weight fetches overlap the previous kernel's tail (the fallback kernel: never). prefetch: bytes
// of each block's weights toward L2 before that wait (matmul_kernel; 0: none); next: the weights
// of the ops after it, streamed toward L2 by its blocks (l2_prefetch.cuh; matmul_kernel
// only).
inline void launch_matmul(cudaStream_t stream, const MatmulArgs& a, const MatmulPlan& p,
                          float* partial, int* counters, bool pdl = false, int prefetch = 0,
                          const WeightHint& next = {}) {
  if (p.splits > 1 && (!partial || !counters)) throw std::invalid_argument("matmul: no scratch");
  if (!p.vectorized) {
    TRT_SPEC_LAUNCH(matmul_fallback_kernel, p.grid, p.block, stream, a, p.geom);
    return;
  }
  switch (a.W.type) {
    case WeightType::F32:
      launch_matmul_typed<WeightType::F32>(stream, a, p, partial, counters, pdl, prefetch, next);
      break;
    case WeightType::F16:
      launch_matmul_typed<WeightType::F16>(stream, a, p, partial, counters, pdl, prefetch, next);
      break;
    case WeightType::BF16:
      launch_matmul_typed<WeightType::BF16>(stream, a, p, partial, counters, pdl, prefetch, next);
      break;
    case WeightType::Q8:
      launch_matmul_typed<WeightType::Q8>(stream, a, p, partial, counters, pdl, prefetch, next);
      break;
    case WeightType::Q4:
      launch_matmul_typed<WeightType::Q4>(stream, a, p, partial, counters, pdl, prefetch, next);
      break;
  }
}

}  // namespace trt_spec::cuda
