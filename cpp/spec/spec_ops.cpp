// spec_ops.cpp: make_spec_ops (spec_ops.h): the SpecOps of the backend's kind.
#include "spec/spec_ops.h"

#include "spec/backend_ops.h"

namespace trt_spec {

std::unique_ptr<SpecOps> make_cpu_spec_ops(CpuBackend& be, int max_batch, int max_k, int vocab);
#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<SpecOps> make_cuda_spec_ops(CudaBackend& be, int max_batch, int max_k, int vocab);
#endif

std::unique_ptr<SpecOps> make_spec_ops(Backend& be, int max_batch, int max_k, int vocab) {
  return make_backend_ops<SpecOps, int, int, int>(be, "speculative decoding", make_cpu_spec_ops,
                                                  TRT_SPEC_CUDA_MAKER(make_cuda_spec_ops),
                                                  max_batch, max_k, vocab);
}

}  // namespace trt_spec
