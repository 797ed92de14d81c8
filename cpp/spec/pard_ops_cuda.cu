// pard_ops_cuda.cu: PardOps on the CUDA backend (pard_ops.h): pard_kernels.cuh's launch on the
// backend's stream, nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "spec/pard_kernels.cuh"
#include "spec/pard_ops.h"

namespace trt_spec {

namespace {

class CudaPardOps final : public PardOps {
 public:
  explicit CudaPardOps(CudaBackend& be) : be_(be) {}

  void rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t mask,
            const RowBuffers& out) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_pard_rows(be_.stream(), st.seqs, slots, B, k, mask, out.tokens, out.pos, out.slot);
    be_.check_launch("pard_rows");
  }

 private:
  CudaBackend& be_;
};

}  // namespace

std::unique_ptr<PardOps> make_cuda_pard_ops(CudaBackend& be) {
  return std::make_unique<CudaPardOps>(be);
}

}  // namespace trt_spec
