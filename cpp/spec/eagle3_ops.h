// eagle3_ops.h: the EAGLE-3 proposer's device ops (eagle3_proposer.h), one implementation per kind
// of backend (eagle3_ops_cpu.cpp, eagle3_ops_cuda.cu), reading and writing backend memory only,
// so that a graph can hold them. The head's own layer is backend ops (embed, rmsnorm, linear,
// rope, attention, swiglu); these lay out its rows (eagle3_rows.h) and pick its tokens.
//
// Shapes: B sequences, batch rows b = 0 .. B-1 being slots[b]; k the draft length.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "spec/eagle3_rows.h"
#include "spec/eagle3_tree.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class Eagle3Ops {
 public:
  virtual ~Eagle3Ops() = default;
  // After a verify pass of draft length k: the rows the head absorbs, [B, k + 1] (tokens,
  // positions, slots, and src: the rows of the target's taps [B, k + 1] they read), and
  // last [B]: each sequence's last absorbed row.
  virtual void absorb_rows(const SpecState& st, const int32_t* slots, int B, int k, int max_seq,
                           Eagle3Rows out, int32_t* last) = 0;
  // feat [max_batch, dim] row slots[b] = x [.., dim] row rows[b].
  virtual void keep(const int32_t* slots, int B, const int32_t* rows, const float* x, int dim,
                    float* feat) = 0;
  // Chain step j < k: from the head's logits [B, draft_vocab], each sequence's best draft token
  // (larger logit, then lower id), mapped to the target's vocabulary by tokens [draft_vocab],
  // becomes node j of its tree; next [B]: the rows of step j + 1.
  virtual void chain_step(const SpecState& st, const int32_t* slots, int B, int j, int max_seq,
                          const float* logits, int draft_vocab, const int32_t* tokens,
                          Eagle3Rows next) = 0;
  // Tree step j of width w (eagle3_tree.h): logits [B, rows, draft_vocab] of the step's rows (1 for
  // j = 0, else w); trees [B]: scratch; with expand, next [B, w]: the next step's rows.
  virtual void tree_step(const SpecState& st, const int32_t* slots, int B, int j, int w,
                         bool expand, int max_seq, const float* logits, int draft_vocab,
                         const int32_t* tokens, Eagle3Tree* trees, Eagle3TreeRows next) = 0;
  // Each sequence's tree: its best min(k, max_nodes) candidates of trees [B].
  virtual void tree_select(const SpecState& st, const int32_t* slots, int B, int k,
                           const Eagle3Tree* trees) = 0;
};

// The ops of a backend (CPU or CUDA) for up to max_batch sequences; Error for a backend without
// them.
std::unique_ptr<Eagle3Ops> make_eagle3_ops(Backend& be, int max_batch);

// The checks both implementations make.
inline void check_eagle3_batch(int max_batch, int B, int k) {
  if (B < 0 || B > max_batch || k < 0 || k > kMaxDraftNodes)
    throw InvalidArgument("eagle3 ops: bad batch or draft length");
}
inline void check_eagle3_tree(int max_batch, int B, int j, int w, int draft_vocab) {
  check_eagle3_batch(max_batch, B, j + 1);
  if (w < 2 || w > kEagle3MaxTopK || w > draft_vocab)
    throw InvalidArgument("eagle3 ops: bad tree width");
}

}  // namespace trt_spec
