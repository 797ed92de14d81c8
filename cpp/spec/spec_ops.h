// spec_ops.h: the device ops every speculative iteration shares, whichever proposer drafted:
// the verify rows, acceptance and the cache moves' list, one implementation per kind of backend
// (spec_ops_cpu.cpp, spec_ops_cuda.cu), so that backends stay tensor ops only. A proposer's own
// ops are its own (draft_model_ops.h, lookup_ops.h).
//
// Every op reads and writes backend memory only (the sequences' SeqState, their sampling state,
// the token history), never host data written between ops: the iteration program
// (iteration.h) issues them with the models' forwards and a backend with graphs captures the
// whole iteration. The rules they apply are the shared host/device functions of accept.h
// (acceptance) and seq_state.h (commit, random numbers).
//
// Shapes: B sequences per op, rows b = 0 .. B-1 being slots[b]; k the iteration's draft length
// (tree nodes); q the draft model's dense distributions [k, B, vocab_draft]; the verify pass's
// logits [B, k + 1, vocab] (row 0 of a sequence: its root, row 1 + i: node i).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "common/errors.h"
#include "kernels/penalties.h"
#include "spec/draft_tree.h"
#include "spec/seq_state.h"

namespace trt_spec {

// The sequences' state in backend memory (all indexed by KV slot).
struct SpecState {
  SeqState* seqs = nullptr;             // [max_batch]
  SamplingState* states = nullptr;      // [max_batch]
  int32_t* history = nullptr;           // [max_batch, max_seq]: the token at each position (the
                                        // prompt, what was generated, then `last` at n_past)
  const int32_t* prediction = nullptr;  // [max_batch, max_seq]: predicted output tokens
  int max_seq = 0;
};

// Row metadata buffers of a forward pass (backend memory, one entry per row).
struct RowBuffers {
  int32_t* tokens = nullptr;
  int32_t* pos = nullptr;
  int32_t* slot = nullptr;
  int32_t* kv_idx = nullptr;
  int32_t* tree_base = nullptr;
  uint64_t* tree_bits = nullptr;

  Rows rows(bool tree) const {
    Rows r{tokens, pos, slot};
    if (tree) {
      r.kv_idx = kv_idx;
      r.tree_base = tree_base;
      r.tree_bits = tree_bits;
    }
    return r;
  }
};

// The sequences' penalties (kernels/penalties.h) in backend memory, indexed by KV slot.
struct PenaltyState {
  PenaltyParams* params = nullptr;  // [max_batch]
  int32_t* counts = nullptr;        // [max_batch, vocab]: each token's count among the generated
  uint32_t* prompt = nullptr;       // [max_batch, words]: bit x set where x occurs in the prompt
  int vocab = 0, words = 0;
};

// Cache moves of the accepted nodes: [B * kMaxDraftNodes] entries (backend.h kv_copy).
struct KvMoves {
  int32_t* slot = nullptr;
  int32_t* src = nullptr;
  int32_t* dst = nullptr;
};

class SpecOps {
 public:
  virtual ~SpecOps() = default;

  // Fixes each sequence's tree for an iteration of `source` with k nodes (fewer where the
  // request caps them or the tree holds fewer: the source's proposer left tree.n nodes; none
  // where the source is not allowed) and writes the verify rows [B, k + 1] (tree rows: kv_idx
  // and mask set; nodes past the tree pad the block).
  virtual void verify_rows(const SpecState& st, const int32_t* slots, int B, int k,
                           DraftSource source, const RowBuffers& out) = 0;
  // Acceptance (accept.h), the emitted tokens, the commit (seq_state.h), the history append
  // and the cache moves of the accepted nodes.
  virtual void accept(const SpecState& st, const int32_t* slots, int B, int k, const float* logits,
                      int vocab, const float* q, int vocab_draft, const KvMoves& moves) = 0;
  // The penalties (kernels/penalties.h), in place, on the verify logits [B, k + 1, vocab] of the
  // sequences whose params are active: row 0 sees the generated tokens the counts hold, row
  // 1 + i those and node i's path (i and its ancestors); padding rows are left alone.
  virtual void penalize(const SpecState& st, const PenaltyState& ps, const int32_t* slots, int B,
                        int k, float* logits, int vocab) = 0;
  // The same on n rows [n, vocab] of the sequences in row_slots[i] with the counts alone (a
  // prompt's last row: the first token).
  virtual void penalize_rows(const PenaltyState& ps, const int32_t* row_slots, int n, float* logits,
                             int vocab) = 0;
  // The same on a draft step's logits [B, stride] (ids [0, vocab)): row b sees the counts and the
  // path of node j - 1 of sequence b's tree (none for j = 0), the text its node j follows, so
  // that a draft proposes from what the penalized target will score.
  virtual void penalize_draft(const SpecState& st, const PenaltyState& ps, const int32_t* slots,
                              int B, int j, float* logits, int stride, int vocab) = 0;
  // Token masks (engine/constraint.h) on n rows of logits [n, vocab]: logit x of row r becomes
  // -inf where bit x of masks [n, words] is clear.
  virtual void mask_rows(float* logits, int n, int vocab, const uint32_t* masks, int words) = 0;
  // Adds the tokens the last accept() emitted to the counts of sequences whose params are active.
  virtual void count_emitted(const SpecState& st, const PenaltyState& ps, const int32_t* slots,
                             int B) = 0;
  // Where the last accept() drew each emitted token, for Backend::logprobs: entry e = b (k + 1)
  // + d for the d-th token sequence b emitted: its verify row (the root's for d = 0, else the
  // row of the accepted node path[d - 1]; -1 past the last token), the token and the KV slot.
  virtual void emitted_rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t* rows,
                            int32_t* tokens, int32_t* row_slots) = 0;
};

// The SpecOps of a backend (CPU or CUDA), with scratch for max_batch sequences of up to max_k
// nodes over rows of up to vocab ids (the wider of the target's and the draft's vocabularies).
// Throws Error for a backend without an implementation.
std::unique_ptr<SpecOps> make_spec_ops(Backend& be, int max_batch, int max_k, int vocab);

// The sizes a SpecOps was made for; both backends refuse calls beyond them (InvalidArgument).
struct SpecOpsLimits {
  int max_batch, max_k, vocab;
  void check_accept(int B, int k, int row_vocab) const {
    if (B > max_batch || k > max_k || row_vocab > vocab)
      throw InvalidArgument("accept: batch, draft length or vocabulary beyond the scratch");
  }
};

}  // namespace trt_spec
