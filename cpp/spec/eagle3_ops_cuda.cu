// eagle3_ops_cuda.cu: Eagle3Ops on the CUDA backend (eagle3_ops.h): eagle3_kernels.cuh's launches
// on the backend's stream, launching nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "spec/eagle3_kernels.cuh"
#include "spec/eagle3_ops.h"

namespace trt_spec {

namespace {

class CudaEagle3Ops final : public Eagle3Ops {
 public:
  CudaEagle3Ops(CudaBackend& be, int max_batch) : be_(be), max_batch_(max_batch) {}

  void absorb_rows(const SpecState& st, const int32_t* slots, int B, int k, int max_seq,
                   Eagle3Rows out, int32_t* last) override {
    check_eagle3_batch(max_batch_, B, k);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_eagle3_absorb(be_.stream(), st.seqs, slots, B, k, max_seq, out, last);
    be_.check_launch("eagle3_absorb");
  }

  void keep(const int32_t* slots, int B, const int32_t* rows, const float* x, int dim,
            float* feat) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_eagle3_keep(be_.stream(), slots, B, rows, x, dim, feat);
    be_.check_launch("eagle3_keep");
  }

  void chain_step(const SpecState& st, const int32_t* slots, int B, int j, int max_seq,
                  const float* logits, int draft_vocab, const int32_t* tokens,
                  Eagle3Rows next) override {
    check_eagle3_batch(max_batch_, B, j + 1);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_eagle3_chain(be_.stream(), st.seqs, slots, B, j, max_seq, logits, draft_vocab,
                              tokens, next);
    be_.check_launch("eagle3_chain");
  }

  void tree_step(const SpecState& st, const int32_t* slots, int B, int j, int w, bool expand,
                 int max_seq, const float* logits, int draft_vocab, const int32_t* tokens,
                 Eagle3Tree* trees, Eagle3TreeRows next) override {
    check_eagle3_tree(max_batch_, B, j, w, draft_vocab);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_eagle3_tree_step(be_.stream(), st.seqs, slots, B, j, w, expand, max_seq, logits,
                                  draft_vocab, tokens, trees, next);
    be_.check_launch("eagle3_tree_step");
  }

  void tree_select(const SpecState& st, const int32_t* slots, int B, int k,
                   const Eagle3Tree* trees) override {
    check_eagle3_batch(max_batch_, B, k);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_eagle3_tree_select(be_.stream(), st.seqs, slots, B, k, trees);
    be_.check_launch("eagle3_tree_select");
  }

 private:
  CudaBackend& be_;
  int max_batch_;
};

}  // namespace

std::unique_ptr<Eagle3Ops> make_cuda_eagle3_ops(CudaBackend& be, int max_batch) {
  return std::make_unique<CudaEagle3Ops>(be, max_batch);
}

}  // namespace trt_spec
