// spec_ops_cuda.cu: SpecOps on the CUDA backend (spec_ops.h): the launch functions of
// spec_launch.cuh on the backend's stream, with scratch allocated once (capture-safe; the
// multi-block rows' scratch zeroed by alloc, its counters left zero by the kernels), launching
// nothing during the backend's sizing pass.
#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/errors.h"
#include "spec/penalty_kernels.cuh"
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
        rows_(be, cuda::sample_scratch_bytes(cuda::spec_sample_rows(max_batch, max_k))),
        limits_{max_batch, max_k, vocab} {}

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
    limits_.check_accept(B, k, vocab);
    if (be_.sizing() || B <= 0) return;
    cuda::launch_accept(be_.stream(), grid(vocab), logits, q, B, k, vocab, vocab_draft, st.seqs,
                        slots, dev_states(st.states), {P_.as<float>(), best_.as<int32_t>(), rows()},
                        st.history, st.max_seq, moves.slot, moves.src, moves.dst);
    be_.check_launch("accept");
  }

  void penalize(const SpecState& st, const PenaltyState& ps, const int32_t* slots, int B, int k,
                float* logits, int vocab) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_penalize(be_.stream(), st.seqs, ps, slots, B * (k + 1), k, logits, vocab);
    be_.check_launch("penalize");
  }

  void penalize_rows(const PenaltyState& ps, const int32_t* row_slots, int n, float* logits,
                     int vocab) override {
    if (be_.sizing() || n <= 0) return;
    cuda::launch_penalize(be_.stream(), nullptr, ps, row_slots, n, -1, logits, vocab);
    be_.check_launch("penalize_rows");
  }

  void mask_rows(float* logits, int n, int vocab, const uint32_t* masks, int words) override {
    if (be_.sizing() || n <= 0) return;
    cuda::launch_mask_rows(be_.stream(), logits, n, vocab, masks, words);
    be_.check_launch("mask_rows");
  }

  void penalize_draft(const SpecState& st, const PenaltyState& ps, const int32_t* slots, int B,
                      int j, float* logits, int stride, int vocab) override {
    if (be_.sizing()) return;
    cuda::launch_penalize(be_.stream(), st.seqs, ps, slots, B, -1, logits, vocab, j - 1, stride);
    be_.check_launch("penalize_draft");
  }

  void count_emitted(const SpecState& st, const PenaltyState& ps, const int32_t* slots,
                     int B) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_count_emitted(be_.stream(), st.seqs, ps, slots, B);
    be_.check_launch("count_emitted");
  }

  void emitted_rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t* rows,
                    int32_t* tokens, int32_t* row_slots) override {
    if (be_.sizing() || B <= 0) return;
    cuda::launch_emitted_rows(be_.stream(), st.seqs, slots, B, k, rows, tokens, row_slots);
    be_.check_launch("emitted_rows");
  }

 private:
  // The grid of a row of `vocab` ids: the draft's vocabulary may be smaller than the target's.
  cuda::SampleGrid grid(int vocab) const { return cuda::sample_grid(vocab, be_.sm_count()); }
  // The multi-block rows' scratch (fixed per-row records: accept's B (k + 1) rows).
  cuda::SampleScratch rows() { return cuda::sample_scratch(rows_.as<void>()); }

  CudaBackend& be_;
  BackendBuffer P_, best_;
  BackendBuffer rows_;
  SpecOpsLimits limits_;
};

}  // namespace

std::unique_ptr<SpecOps> make_cuda_spec_ops(CudaBackend& be, int max_batch, int max_k, int vocab) {
  return std::make_unique<CudaSpecOps>(be, max_batch, max_k, vocab);
}

}  // namespace trt_spec
