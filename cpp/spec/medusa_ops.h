// medusa_ops.h: the Medusa proposer's device ops (medusa_proposer.h), one implementation per kind
// of backend (medusa_ops_cpu.cpp, medusa_ops_cuda.cu), reading and writing backend memory only,
// so that a graph can hold them. The heads' own layers are backend ops (linear, swiglu, add).
//
// Shapes: B sequences, rows b = 0 .. B-1 being slots[b]; dim the target's hidden size.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "spec/medusa_tree.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class MedusaOps {
 public:
  virtual ~MedusaOps() = default;
  // After acceptance: kept [max_batch, dim] row slots[b] = hidden [B, k + 1, dim] at sequence
  // b's stop row (medusa_stop_row): the hidden state its heads read next.
  virtual void keep(const SpecState& st, const int32_t* slots, int B, int k, const float* hidden,
                    int dim, float* kept) = 0;
  // The heads' logits [heads, B, vocab] -> each sequence's tree of up to min(k, max_nodes)
  // nodes (medusa_tree.h: the top kMedusaTopK tokens of each head, best first).
  virtual void tree(const SpecState& st, const int32_t* slots, int B, int k, const float* logits,
                    int heads, int vocab) = 0;
};

// The ops of a backend (CPU or CUDA) for up to max_batch sequences; Error for a backend without
// them.
std::unique_ptr<MedusaOps> make_medusa_ops(Backend& be, int max_batch);

// The checks both implementations make.
inline void check_medusa_tree(int max_batch, int B, int k, int heads, int vocab) {
  if (B < 0 || B > max_batch || k < 0 || k > kMaxDraftNodes || heads < 1 ||
      heads > kMedusaMaxHeads || vocab < kMedusaTopK)
    throw InvalidArgument("medusa tree: bad batch, draft length, heads or vocabulary");
}

}  // namespace trt_spec
