// draft_model_ops_cpu.cpp: DraftModelOps on the CPU backend (draft_model_ops.h), and
// make_draft_model_ops: the ops of a backend's kind.
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "spec/backend_ops.h"
#include "spec/draft_model_ops.h"

namespace trt_spec {

namespace {

class CpuDraftModelOps final : public DraftModelOps {
 public:
  CpuDraftModelOps(CpuBackend& be, int max_batch, int vocab)
      : pool_(be.pool()), max_batch_(max_batch), max_vocab_(vocab) {}

  void draft_rows(const SpecState& st, const int32_t* slots, int B, int j,
                  const RowBuffers& out) override {
    for (int b = 0; b < B; ++b) {
      const SeqState& s = st.seqs[slots[b]];
      if (j == 0) {
        out.tokens[2 * b] = s.prev;
        out.pos[2 * b] = spec_draft_pos(s, s.n_past - 1);
        out.tokens[2 * b + 1] = s.last;
        out.pos[2 * b + 1] = spec_draft_pos(s, s.n_past);
        out.slot[2 * b] = out.slot[2 * b + 1] = slots[b];
      } else {
        out.tokens[b] = s.tree.token[j - 1];
        out.pos[b] = spec_draft_pos(s, s.n_past + j);
        out.slot[b] = slots[b];
      }
    }
  }

  void draft_sample(const SpecState& st, const int32_t* slots, int B, int j, float* logits_q,
                    int vocab, int vocab_common, const RowBuffers* next) override {
    check_draft_sample(max_batch_, max_vocab_, B, j, vocab, vocab_common);
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> q;
      for (int64_t b = b0; b < b1; ++b) {
        SeqState& s = st.seqs[slots[b]];
        const SamplingParams& p = st.states[slots[b]].params;
        float* row = logits_q + b * vocab;
        int32_t d;
        if (sampling_is_greedy(p)) {
          d = argmax_row(row, vocab_common);
        } else {
          q.resize(vocab);
          sampling_probs(row, vocab_common, vocab, p, q.data());
          std::copy(q.begin(), q.end(), row);
          d = sample_dense(row, vocab, spec_uniform(p.seed, s.n_gen + j, kStreamDraft));
        }
        tree_set_chain_node(s.tree, j, d, kNodeDense);
        if (next) {  // draft step j + 1's row: node j
          next->tokens[b] = d;
          next->pos[b] = spec_draft_pos(s, s.n_past + j + 1);
          next->slot[b] = slots[b];
        }
      }
    });
  }

 private:
  ThreadPool& pool_;
  int max_batch_, max_vocab_;
};

std::unique_ptr<DraftModelOps> make_cpu(CpuBackend& be, int max_batch, int vocab) {
  return std::make_unique<CpuDraftModelOps>(be, max_batch, vocab);
}

}  // namespace

#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<DraftModelOps> make_cuda_draft_model_ops(CudaBackend& be, int max_batch, int vocab);
#endif

std::unique_ptr<DraftModelOps> make_draft_model_ops(Backend& be, int max_batch, int vocab) {
  return make_backend_ops<DraftModelOps, int, int>(be, "the draft model", make_cpu,
                                                   TRT_SPEC_CUDA_MAKER(make_cuda_draft_model_ops),
                                                   max_batch, vocab);
}

}  // namespace trt_spec
