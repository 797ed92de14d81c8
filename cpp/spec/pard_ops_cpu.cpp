// pard_ops_cpu.cpp: PardOps on the CPU backend (pard_ops.h), and make_pard_ops: the op of a
// backend's kind.
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "spec/backend_ops.h"
#include "spec/pard_ops.h"

namespace trt_spec {

namespace {

class CpuPardOps final : public PardOps {
 public:
  void rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t mask,
            const RowBuffers& out) override {
    for (int b = 0; b < B; ++b) {
      const SeqState& s = st.seqs[slots[b]];
      for (int r = 0; r <= k; ++r) {
        const int row = b * (k + 1) + r;
        out.tokens[row] = r == 0 ? s.prev : (r == 1 ? s.last : mask);
        out.pos[row] = spec_draft_pos(s, s.n_past - 1 + r);
        out.slot[row] = slots[b];
      }
    }
  }
};

std::unique_ptr<PardOps> make_cpu(CpuBackend&) {
  return std::make_unique<CpuPardOps>();
}

}  // namespace

#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<PardOps> make_cuda_pard_ops(CudaBackend& be);
#endif

std::unique_ptr<PardOps> make_pard_ops(Backend& be) {
  return make_backend_ops<PardOps>(be, "PARD", make_cpu, TRT_SPEC_CUDA_MAKER(make_cuda_pard_ops));
}

}  // namespace trt_spec
