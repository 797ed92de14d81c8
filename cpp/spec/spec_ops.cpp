// spec_ops.cpp: make_spec_ops (spec_ops.h): the SpecOps of the backend's kind.
#include "spec/spec_ops.h"

#include "backend/cpu/cpu_backend.h"
#include "common/errors.h"

#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace trt_spec {

std::unique_ptr<SpecOps> make_cpu_spec_ops(CpuBackend& be, int max_batch, int max_k, int vocab);
#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<SpecOps> make_cuda_spec_ops(CudaBackend& be, int max_batch, int max_k, int vocab);
#endif

std::unique_ptr<SpecOps> make_spec_ops(Backend& be, int max_batch, int max_k, int vocab) {
  if (auto* cpu = dynamic_cast<CpuBackend*>(&be))
    return make_cpu_spec_ops(*cpu, max_batch, max_k, vocab);
#ifdef TRT_SPEC_WITH_CUDA
  if (auto* gpu = dynamic_cast<CudaBackend*>(&be))
    return make_cuda_spec_ops(*gpu, max_batch, max_k, vocab);
#endif
  throw Error("speculative decoding has no ops for the backend '" + be.name() + "'");
}

}  // namespace trt_spec
