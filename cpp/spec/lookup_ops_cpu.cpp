// lookup_ops_cpu.cpp: LookupOps on the CPU backend (lookup_ops.h): lookup.h's serial rule per
// sequence, on the backend's thread pool; and make_lookup_ops: the op of a backend's kind.
#include <algorithm>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "spec/backend_ops.h"
#include "spec/lookup.h"
#include "spec/lookup_ops.h"

namespace trt_spec {

namespace {

class CpuLookupOps final : public LookupOps {
 public:
  explicit CpuLookupOps(CpuBackend& be) : pool_(be.pool()) {}

  void lookup(const SpecState& st, const int32_t* slots, int B) override {
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        SeqState& s = st.seqs[slots[b]];
        if (!(s.sources & draft_source_bit(DraftSource::kLookup))) {
          s.ready_n = 0;
          continue;
        }
        const size_t off = static_cast<size_t>(slots[b]) * st.max_seq;
        const int len = std::min(s.n_past + 1, st.max_seq);
        const int ngram = lookup_propose_serial(st.history + off, len, st.prediction + off,
                                                s.pred_len, s.max_nodes, s.tree);
        s.tree.tag = s.tree.n > 0 ? ngram : 0;
        s.ready_n = s.tree.n;
      }
    });
  }

 private:
  ThreadPool& pool_;
};

std::unique_ptr<LookupOps> make_cpu(CpuBackend& be) {
  return std::make_unique<CpuLookupOps>(be);
}

}  // namespace

#ifdef TRT_SPEC_WITH_CUDA
std::unique_ptr<LookupOps> make_cuda_lookup_ops(CudaBackend& be);
#endif

std::unique_ptr<LookupOps> make_lookup_ops(Backend& be) {
  return make_backend_ops<LookupOps>(be, "prompt lookup", make_cpu,
                                     TRT_SPEC_CUDA_MAKER(make_cuda_lookup_ops));
}

}  // namespace trt_spec
