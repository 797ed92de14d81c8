// pard_proposer.h: a PARD parallel draft as a Proposer (proposer.h): an ordinary Qwen2 / Llama
// draft model trained to predict K tokens at once (the engine's draft with "pard": {"token": M}
// in its metadata; PARD, arXiv 2504.18583). One draft forward over [prev, last, M, .., M]
// (k + 1 rows per sequence, K - 1 mask tokens M at the positions that follow) gives the
// distributions of all k nodes, each drawn from its own row (its q, kept for the exact
// acceptance test, as the draft model's): the k sequential draft steps of a chain become one.
//
// Everything else is the draft model's (draft_model_proposer.h): the prompt read, the
// deferral of automatic requests, the catch-up and the controller. The mask rows leave entries
// at the nodes' positions that the accepted tokens must replace, so after an iteration the
// draft holds the sequence up to `last` only, and the next one first catches up the accepted
// nodes (valid_after).
#pragma once

#include <memory>

#include "spec/draft_model_proposer.h"
#include "spec/pard_ops.h"

namespace trt_spec {

class PardProposer final : public DraftModelProposer {
 public:
  PardProposer(Backend& be, Model& draft, int max_batch, int max_k, int vocab_target,
               ProposerOptions opts, int32_t mask_token);

  void issue_propose(IterationContext& ctx, int k) override;

  int32_t mask_token() const { return mask_; }

 protected:
  // Positions up to the iteration's `last` (n_past - n_new + 1 after it), never past n_past - 1.
  int valid_after(const SeqState& seq) const override;

 private:
  std::unique_ptr<PardOps> pard_;
  int32_t mask_;
  int max_batch_, max_k_;
  // Logit rows of the parallel forward for each (B, k): entry j B + b is row b (k + 1) + 1 + j,
  // so that the logits come out as [k, B, vocab], the q layout draft_sample reads.
  BackendBuffer logit_rows_;
  size_t table_offset(int B, int k) const;
};

// The registry's factory: the engine's draft model where its metadata marks it PARD.
std::unique_ptr<Proposer> make_pard_proposer(const ProposerEnv& env);

}  // namespace trt_spec
