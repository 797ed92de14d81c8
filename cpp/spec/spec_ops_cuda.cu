// spec_ops_cuda.cu: SpecOps on the CUDA backend (spec_ops.h): the launch functions of
// spec_launch.cuh on the backend's stream, with scratch allocated once (capture-safe; the
// multi-block rows' scratch zeroed by alloc, its counters left zero by the kernels), launching
// nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/errors.h"
#include "spec/spec_launch.cuh"
#include "spec/spec_ops.h"

namespace trt_spec {

namespace {

const cuda::DevSamplingState* dev_states(const SamplingState* s) {
  return reinterpret_cast<const cuda::DevSamplingState*>(s);
}

class CudaSpecOps final : public SpecOps {
 public:
  CudaSpecOps(CudaBackend& be, int max_batch, int max_k, int vocab)
      : be_(be),
        P_(be, static_cast<size_t>(max_batch) * (max_k + 1) * vocab * sizeof(float)),
        best_(be, static_cast<size_t>(max_batch) * (max_k + 1) * sizeof(int32_t)),
        grid_(cuda::sample_grid(vocab, be.sm_count())),
        rows_(be, cuda::sample_scratch_bytes(cuda::spec_sample_rows(max_batch, max_k),
                                             cuda::sample_grid(vocab, be.sm_count()).chunks)),
        max_batch_(max_batch),
        max_k_(max_k),
        vocab_(vocab) {}

  void draft_rows(const SpecState& st, const int32_t* slots, int B, int j,
                  const RowBuffers& out) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_draft_rows(be_.stream(), st.seqs, slots, B, j, out.tokens, out.pos, out.slot);
    be_.check_launch("draft_rows");
  }

  void draft_sample(const SpecState& st, const int32_t* slots, int B, int j, float* logits_q,
                    int vocab, int vocab_common, const RowBuffers* next) override {
    if (j < 0 || j >= kMaxDraftNodes || vocab_common <= 0 || vocab_common > vocab)
      throw InvalidArgument("draft_sample: bad draft index or vocabulary");
    if (B > max_batch_ || vocab > vocab_)
      throw InvalidArgument("draft_sample: batch or vocabulary beyond the scratch");
    if (be_.sizing() || B <= 0) return;
    cuda::launch_draft_sample(
        be_.stream(), grid(vocab), logits_q, B, vocab, vocab_common, j, st.seqs, slots,
        dev_states(st.states), rows(B),
        cuda::NextRows{next ? next->tokens : nullptr, next ? next->pos : nullptr,
                       next ? next->slot : nullptr});
    be_.check_launch("draft_sample");
  }

  void verify_rows(const SpecState& st, const int32_t* slots, int B, int k, DraftSource source,
                   const RowBuffers& out) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_verify_rows(be_.stream(), st.seqs, slots, B, k, static_cast<int>(source),
                             out.tokens, out.pos, out.slot, out.kv_idx, out.tree_base,
                             out.tree_bits);
    be_.check_launch("verify_rows");
  }

  void accept(const SpecState& st, const int32_t* slots, int B, int k, const float* logits,
              int vocab, const float* q, int vocab_draft, const KvMoves& moves) override {
    if (B > max_batch_ || k > max_k_ || vocab > vocab_)
      throw InvalidArgument("accept: batch, draft length or vocabulary beyond the scratch");
    if (be_.sizing() || B <= 0) return;
    cuda::launch_accept(be_.stream(), grid(vocab), logits, q, B, k, vocab, vocab_draft, st.seqs,
                        slots, dev_states(st.states),
                        {P_.as<float>(), best_.as<int32_t>(), rows(B * (k + 1))}, st.history,
                        st.max_seq, moves.slot, moves.src, moves.dst);
    be_.check_launch("accept");
  }

  void lookup(const SpecState& st, const int32_t* slots, int B) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_lookup(be_.stream(), st.seqs, slots, B, st.history, st.prediction, st.max_seq);
    be_.check_launch("lookup");
  }

 private:
  // The grid of a row of `vocab` ids: the draft's vocabulary may be smaller than the target's.
  // Its chunks never exceed grid_'s (fewer ids, same SM count), so the scratch fits.
  cuda::SampleGrid grid(int vocab) const { return cuda::sample_grid(vocab, be_.sm_count()); }
  // The scratch laid out for `rows` rows of grid_.chunks chunks (any smaller grid fits).
  cuda::SampleScratch rows(int rows) {
    return cuda::sample_scratch(rows_.as<void>(), rows, grid_.chunks);
  }

  CudaBackend& be_;
  BackendBuffer P_, best_;
  cuda::SampleGrid grid_;
  BackendBuffer rows_;
  int max_batch_, max_k_, vocab_;
};

}  // namespace

std::unique_ptr<SpecOps> make_cuda_spec_ops(CudaBackend& be, int max_batch, int max_k, int vocab) {
  return std::make_unique<CudaSpecOps>(be, max_batch, max_k, vocab);
}

}  // namespace trt_spec
