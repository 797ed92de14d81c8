// l2_budget.h: the default byte budgets of the weights streamed toward L2 ahead of their use
// (l2_prefetch.cuh, matmul_prefetch), in plain C++: the host reads the same numbers (the
// bindings export them as CUDA_PREFETCH_*; the Python cost model prices the prefetch with them).
#pragma once

#include <cstdint>

namespace trt_spec::cuda {

// The default budget of one block's prefetch: 396 resident one-row blocks (3 per SM on 132 SMs)
// keep 12.7 MB in flight, the persistent forward two ops of it: well inside a 50 MB L2.
constexpr int kPrefetchBlockBytes = 32 * 1024;
// The default bytes of one launch's hint of the next ops' weights (a third of a 50 MB L2).
constexpr int64_t kPrefetchNextBytes = int64_t{16} << 20;

}  // namespace trt_spec::cuda
