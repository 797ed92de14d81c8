// draft_model_ops_cuda.cu: DraftModelOps on the CUDA backend (draft_model_ops.h): the launch
// functions of draft_model_kernels.cuh on the backend's stream, with the multi-block rows'
// scratch allocated once (capture-safe), launching nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "spec/draft_model_kernels.cuh"
#include "spec/draft_model_ops.h"

namespace trt_spec {

namespace {

const cuda::DevSamplingState* dev_states(const SamplingState* s) {
  return reinterpret_cast<const cuda::DevSamplingState*>(s);
}

class CudaDraftModelOps final : public DraftModelOps {
 public:
  CudaDraftModelOps(CudaBackend& be, int max_batch, int vocab)
      : be_(be),
        rows_(be, cuda::sample_scratch_bytes(max_batch)),
        max_batch_(max_batch),
        max_vocab_(vocab) {}

  void draft_rows(const SpecState& st, const int32_t* slots, int B, int j,
                  const RowBuffers& out) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_draft_rows(be_.stream(), st.seqs, slots, B, j, out.tokens, out.pos, out.slot);
    be_.check_launch("draft_rows");
  }

  void draft_sample(const SpecState& st, const int32_t* slots, int B, int j, float* logits_q,
                    int vocab, int vocab_common, const RowBuffers* next) override {
    check_draft_sample(max_batch_, max_vocab_, B, j, vocab, vocab_common);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_draft_sample(
        be_.stream(), grid(vocab), logits_q, B, vocab, vocab_common, j, st.seqs, slots,
        dev_states(st.states), rows(),
        cuda::NextRows{next ? next->tokens : nullptr, next ? next->pos : nullptr,
                       next ? next->slot : nullptr});
    be_.check_launch("draft_sample");
  }

 private:
  cuda::SampleGrid grid(int vocab) const { return cuda::sample_grid(vocab, be_.sm_count()); }
  cuda::SampleScratch rows() { return cuda::sample_scratch(rows_.as<void>()); }

  CudaBackend& be_;
  BackendBuffer rows_;  // the multi-block rows' scratch, B rows
  int max_batch_, max_vocab_;
};

}  // namespace

std::unique_ptr<DraftModelOps> make_cuda_draft_model_ops(CudaBackend& be, int max_batch,
                                                         int vocab) {
  return std::make_unique<CudaDraftModelOps>(be, max_batch, vocab);
}

}  // namespace trt_spec
