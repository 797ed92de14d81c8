// draft_model_ops.h: the draft model proposer's device ops (draft_model_proposer.h), one
// implementation per kind of backend (draft_model_ops_cpu.cpp, draft_model_ops_cuda.cu). Like
// SpecOps (spec_ops.h), they read and write backend memory only, so a graph can hold them.
//
// Shapes: B sequences, rows b = 0 .. B-1 being slots[b]; the draft's logits [B, vocab] of step j.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class DraftModelOps {
 public:
  virtual ~DraftModelOps() = default;
  // Draft step j: the chain rows of each sequence: j = 0: [prev, last] at positions
  // n_past - 1, n_past (2 rows per sequence); j >= 1: [node j - 1] at n_past + j.
  virtual void draft_rows(const SpecState& st, const int32_t* slots, int B, int j,
                          const RowBuffers& out) = 0;
  // Node j of each sequence's chain (the tree's n becomes j + 1), drawn from the draft's logits
  // [B, vocab] (ids below vocab_common only); for sampling sequences the row becomes, in place,
  // q_j: the dense distribution it was drawn from. With `next`, also the rows of draft step
  // j + 1 (what draft_rows(j + 1) writes: node j at n_past + j + 1), so that step needs no rows
  // op.
  virtual void draft_sample(const SpecState& st, const int32_t* slots, int B, int j,
                            float* logits_q, int vocab, int vocab_common,
                            const RowBuffers* next = nullptr) = 0;
};

// The ops of a backend (CPU or CUDA) for up to max_batch sequences over rows of up to vocab ids;
// both refuse calls beyond them (InvalidArgument). Error for a backend without them.
std::unique_ptr<DraftModelOps> make_draft_model_ops(Backend& be, int max_batch, int vocab);

// The checks both implementations make.
inline void check_draft_sample(int max_batch, int max_vocab, int B, int j, int row_vocab,
                               int vocab_common) {
  if (j < 0 || j >= kMaxDraftNodes || vocab_common <= 0 || vocab_common > row_vocab)
    throw InvalidArgument("draft_sample: bad draft index or vocabulary");
  if (B > max_batch || row_vocab > max_vocab)
    throw InvalidArgument("draft_sample: batch or vocabulary beyond the scratch");
}

}  // namespace trt_spec
