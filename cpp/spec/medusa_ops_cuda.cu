// medusa_ops_cuda.cu: MedusaOps on the CUDA backend (medusa_ops.h): medusa_kernels.cuh's launches
// on the backend's stream, with the top tokens' scratch allocated once (capture-safe), launching
// nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "spec/medusa_kernels.cuh"
#include "spec/medusa_ops.h"

namespace trt_spec {

namespace {

class CudaMedusaOps final : public MedusaOps {
 public:
  CudaMedusaOps(CudaBackend& be, int max_batch)
      : be_(be), top_(be, sizeof(MedusaTopK) * max_batch), max_batch_(max_batch) {}

  void keep(const SpecState& st, const int32_t* slots, int B, int k, const float* hidden, int dim,
            float* kept) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_medusa_keep(be_.stream(), st.seqs, slots, B, k, hidden, dim, kept);
    be_.check_launch("medusa_keep");
  }

  void tree(const SpecState& st, const int32_t* slots, int B, int k, const float* logits, int heads,
            int vocab) override {
    check_medusa_tree(max_batch_, B, k, heads, vocab);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_medusa_tree(be_.stream(), st.seqs, slots, B, k, logits, heads, vocab,
                             top_.as<MedusaTopK>());
    be_.check_launch("medusa_tree");
  }

 private:
  CudaBackend& be_;
  BackendBuffer top_;  // [max_batch] MedusaTopK
  int max_batch_;
};

}  // namespace

std::unique_ptr<MedusaOps> make_cuda_medusa_ops(CudaBackend& be, int max_batch) {
  return std::make_unique<CudaMedusaOps>(be, max_batch);
}

}  // namespace trt_spec
