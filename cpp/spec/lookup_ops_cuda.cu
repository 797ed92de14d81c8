// lookup_ops_cuda.cu: LookupOps on the CUDA backend (lookup_ops.h): lookup_kernels.cuh's launch
// on the backend's stream, nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "spec/lookup_kernels.cuh"
#include "spec/lookup_ops.h"

namespace trt_spec {

namespace {

class CudaLookupOps final : public LookupOps {
 public:
  explicit CudaLookupOps(CudaBackend& be) : be_(be) {}

  void lookup(const SpecState& st, const int32_t* slots, int B) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_lookup(be_.stream(), st.seqs, slots, B, st.history, st.prediction, st.max_seq);
    be_.check_launch("lookup");
  }

 private:
  CudaBackend& be_;
};

}  // namespace

std::unique_ptr<LookupOps> make_cuda_lookup_ops(CudaBackend& be) {
  return std::make_unique<CudaLookupOps>(be);
}

}  // namespace trt_spec
