// eagle3_ops_cpu.cpp: Eagle3Ops on the CPU backend (eagle3_ops.h); and make_eagle3_ops: the ops
// of a backend's kind.
#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "spec/backend_ops.h"
#include "spec/eagle3_ops.h"
#include "spec/top_tokens.h"

namespace trt_spec {

namespace {

class CpuEagle3Ops final : public Eagle3Ops {
 public:
  CpuEagle3Ops(CpuBackend& be, int max_batch) : pool_(be.pool()), max_batch_(max_batch) {}

  void absorb_rows(const SpecState& st, const int32_t* slots, int B, int k, int max_seq,
                   Eagle3Rows out, int32_t* last) override {
    check_eagle3_batch(max_batch_, B, k);
    for (int b = 0; b < B; ++b) {
      const SeqState& s = st.seqs[slots[b]];
      for (int j = 0; j <= k; ++j) {
        const int r = b * (k + 1) + j;
        eagle3_absorb_row(s, slots[b], b, j, k, max_seq, out.tokens[r], out.pos[r], out.slot[r],
                          out.src[r]);
      }
      last[b] = eagle3_last_row(s, b, k);
    }
  }

  void keep(const int32_t* slots, int B, const int32_t* rows, const float* x, int dim,
            float* feat) override {
    for (int b = 0; b < B; ++b)
      std::memcpy(feat + static_cast<size_t>(slots[b]) * dim,
                  x + static_cast<size_t>(rows[b]) * dim, dim * sizeof(float));
  }

  void chain_step(const SpecState& st, const int32_t* slots, int B, int j, int max_seq,
                  const float* logits, int draft_vocab, const int32_t* tokens,
                  Eagle3Rows next) override {
    check_eagle3_batch(max_batch_, B, j + 1);
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int best = argmax_row(logits + static_cast<size_t>(b) * draft_vocab, draft_vocab);
        eagle3_chain_node(st.seqs[slots[b]], slots[b], j, max_seq, tokens[best], next.tokens[b],
                          next.pos[b], next.slot[b]);
      }
    });
  }

  void tree_step(const SpecState& st, const int32_t* slots, int B, int j, int w, bool expand,
                 int max_seq, const float* logits, int draft_vocab, const int32_t* tokens,
                 Eagle3Tree* trees, Eagle3TreeRows next) override {
    check_eagle3_tree(max_batch_, B, j, w, draft_vocab);
    const int rows = j == 0 ? 1 : w;
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        Eagle3Tree& t = trees[b];
        for (int f = 0; f < rows; ++f)
          top_tokens(logits + (static_cast<size_t>(b) * rows + f) * draft_vocab, draft_vocab, w,
                     t.top[f].id, t.top[f].logp);
        eagle3_tree_expand(t, st.seqs[slots[b]], slots[b], static_cast<int>(b), j, w, expand,
                           max_seq, tokens, next);
      }
    });
  }

  void tree_select(const SpecState& st, const int32_t* slots, int B, int k,
                   const Eagle3Tree* trees) override {
    check_eagle3_batch(max_batch_, B, k);
    for (int b = 0; b < B; ++b) {
      SeqState& s = st.seqs[slots[b]];
      eagle3_tree_select(trees[b], std::min(k, s.max_nodes), s);
    }
  }

 private:
  ThreadPool& pool_;
  int max_batch_;
};

std::unique_ptr<Eagle3Ops> make_cpu(CpuBackend& be, int max_batch) {
  return std::make_unique<CpuEagle3Ops>(be, max_batch);
}

}  // namespace

#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<Eagle3Ops> make_cuda_eagle3_ops(CudaBackend& be, int max_batch);
#endif

std::unique_ptr<Eagle3Ops> make_eagle3_ops(Backend& be, int max_batch) {
  return make_backend_ops<Eagle3Ops, int>(be, "EAGLE-3", make_cpu,
                                          TRT_SPEC_CUDA_MAKER(make_cuda_eagle3_ops), max_batch);
}

}  // namespace trt_spec
