// medusa_proposer.h: Medusa heads as a Proposer (proposer.h), the engine's draft of kind "medusa"
// (the engine's "draft_heads": H heads, each L residual blocks x <- x + SiLU(W x + b) and an
// output head [vocab, dim], reading the target's final normed hidden state).
//
// After every verify pass its keep op (medusa_ops.h) stores, per sequence, the hidden state of
// the row that produced the newest token; an iteration that uses it runs the heads on those
// states (backend ops: gather_rows, linear, swiglu, add) and builds each sequence's tree from
// their top tokens (medusa_tree.h), one-hot nodes that the target's own draws accept or not, so
// the output is target-only decoding's, greedy or sampled. A sequence proposes once it has been
// through one verify pass (its prompt's last row is not kept), so its first iteration is a plain
// step or another source's.
//
// Engine tensors (the builder writes them; models/medusa_source.py reads both published
// layouts): medusa.{h}.res.{l}.weight [2 dim, dim], rows [W; 0], and medusa.{h}.res.{l}.bias
// [2 dim], [b; 1]: the block's SiLU gate in the form Backend::swiglu takes (silu(Wx + b) * 1);
// medusa.{h}.head.weight [vocab, dim]. Its offers are a draft head's (head_offers.h).
#pragma once

#include <memory>
#include <vector>

#include "format/engine_file.h"
#include "model/model.h"
#include "spec/head_offers.h"
#include "spec/medusa_ops.h"
#include "spec/proposer.h"

namespace trt_spec {

class MedusaProposer final : public HeadProposer {
 public:
  // The heads of file's "draft_heads" (kind "medusa") for the target model.
  MedusaProposer(Backend& be, const EngineFile& file, const Model& target, int max_batch,
                 int max_k);

  bool reads_hidden() const override { return true; }
  void begin(int slot, const Admission& a) override;
  bool active(int slot) const override { return ready_[slot]; }

  void issue_propose(IterationContext& ctx, int k) override;
  void issue_after_accept(IterationContext& ctx) override;
  void commit(int slot, const SeqState& seq, bool used) override;

  int heads() const { return heads_; }
  int layers() const { return layers_; }
  // The heads' logits [heads, n, vocab] of hidden states [n, dim] (host memory; tests).
  std::vector<float> head_logits(const std::vector<float>& hidden, int n);

 private:
  struct Head {
    std::vector<WeightView> res_w, res_b;  // [layers]: [2 dim, dim] and [2 dim]
    WeightView out;                        // [vocab, dim]
  };
  // The heads' logits [heads, B, vocab] of x rows gathered from `from` at `rows` [B].
  void run_heads(const float* from, const int32_t* rows, int B, float* logits);

  Backend& be_;
  int heads_ = 0, layers_ = 0, dim_ = 0, vocab_ = 0, max_batch_ = 0;
  std::vector<Head> head_;
  std::unique_ptr<MedusaOps> ops_;
  std::vector<char> ready_;       // [max_batch]: its hidden state is kept
  BackendBuffer kept_;            // [max_batch, dim]
  BackendBuffer x_, gate_, act_;  // [max_batch, dim], [max_batch, 2 dim], [max_batch, dim]
  BackendBuffer logits_;          // [heads, max_batch, vocab]
};

// The registry's factory: the engine's draft heads where they are Medusa's.
std::unique_ptr<Proposer> make_medusa_proposer(const ProposerEnv& env);

}  // namespace trt_spec
