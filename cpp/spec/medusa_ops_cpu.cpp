// medusa_ops_cpu.cpp: MedusaOps on the CPU backend (medusa_ops.h), on the backend's thread pool;
// and make_medusa_ops: the ops of a backend's kind.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "spec/backend_ops.h"
#include "spec/medusa_ops.h"
#include "spec/top_tokens.h"

namespace trt_spec {

namespace {

class CpuMedusaOps final : public MedusaOps {
 public:
  CpuMedusaOps(CpuBackend& be, int max_batch) : pool_(be.pool()), max_batch_(max_batch) {}

  void keep(const SpecState& st, const int32_t* slots, int B, int k, const float* hidden, int dim,
            float* kept) override {
    for (int b = 0; b < B; ++b) {
      const SeqState& s = st.seqs[slots[b]];
      const int row = b * (k + 1) + medusa_stop_row(s.n_acc, s.path);
      std::memcpy(kept + static_cast<size_t>(slots[b]) * dim,
                  hidden + static_cast<size_t>(row) * dim, dim * sizeof(float));
    }
  }

  void tree(const SpecState& st, const int32_t* slots, int B, int k, const float* logits, int heads,
            int vocab) override {
    check_medusa_tree(max_batch_, B, k, heads, vocab);
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        SeqState& s = st.seqs[slots[b]];
        MedusaTopK c;
        for (int h = 0; h < heads; ++h)
          top_tokens(logits + (static_cast<size_t>(h) * B + b) * vocab, vocab, kMedusaTopK,
                     c.token[h], c.logp[h]);
        medusa_build_tree(c, heads, kMedusaTopK, std::min(k, s.max_nodes), s.tree);
      }
    });
  }

 private:
  ThreadPool& pool_;
  int max_batch_;
};

std::unique_ptr<MedusaOps> make_cpu(CpuBackend& be, int max_batch) {
  return std::make_unique<CpuMedusaOps>(be, max_batch);
}

}  // namespace

#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<MedusaOps> make_cuda_medusa_ops(CudaBackend& be, int max_batch);
#endif

std::unique_ptr<MedusaOps> make_medusa_ops(Backend& be, int max_batch) {
  return make_backend_ops<MedusaOps, int>(be, "Medusa", make_cpu,
                                          TRT_SPEC_CUDA_MAKER(make_cuda_medusa_ops), max_batch);
}

}  // namespace trt_spec
