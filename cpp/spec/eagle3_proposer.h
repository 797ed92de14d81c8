// eagle3_proposer.h: EAGLE-3 heads as a Proposer (proposer.h), the engine's draft of kind
// "eagle3": one decoder layer that reads the target's residual stream entering three of its
// layers (the taps: by default 2, L / 2 and L - 3), fused by fc into one feature, beside the
// target's embedding of the next token, with its own KV cache; its output head scores a draft
// vocabulary that maps into the target's (draft_tokens).
//
// Per row (position p, reading the token at p + 1 and a feature g of position p, eagle3_rows.h):
//   g = fc [taps of p]                      (a chain step: the previous step's output instead)
//   r = g                                   (hidden_norm(g) with norm_before_residual)
//   x = [input_norm(embed(token)); hidden_norm(g)]                        [2 dim]
//   h = r + o(attention(rope(qkv(x))))      (its own cache, one layer)
//   out = h + down(swiglu(gate_up(post_norm(h))))                         the row's output
//   logits = head(norm(out))                                              [draft_vocab]
// The head absorbs every prompt chunk (prompt_done; the prompt's last row, whose next token is
// the first sampled one, at start()) and, after each verify pass, the accepted path (whatever
// source proposed it), so its cache holds each position the target's does; it keeps each
// sequence's last output (feat). An iteration that uses it proposes k one-hot nodes: with width
// 1 a chain, the head's best token from feat, then k - 1 steps, each one row per sequence; with
// width w > 1 a dynamic tree (eagle3_tree.h: k steps of w rows per sequence, the k best nodes
// by the head's path probabilities). The target's own draws accept them or not, so the output is
// target-only decoding's, greedy or sampled.
//
// Engine tensors (the builder writes them; builder/eagle3_source.py reads the published
// layout): eagle3.fc.{0,1,2}.weight [dim, dim] (fc's column blocks per tap),
// eagle3.{input,hidden,post}_norm.weight and eagle3.norm.weight [dim],
// eagle3.qkv_embed.weight and eagle3.qkv_hidden.weight [(heads + 2 kv_heads) head_dim, dim] (the
// q, k, v rows over the embedding half and the feature half of x), eagle3.o.weight,
// eagle3.gate_up.weight [2 ffn, dim], eagle3.down.weight, eagle3.head.weight [draft_vocab, dim].
// Offers: a draft head's (head_offers.h).
#pragma once

#include <memory>
#include <vector>

#include "format/engine_file.h"
#include "model/model.h"
#include "spec/eagle3_ops.h"
#include "spec/head_offers.h"
#include "spec/proposer.h"

namespace trt_spec {

class Eagle3Proposer final : public HeadProposer {
 public:
  // The head of file's "draft_heads" (kind "eagle3") for the target model (its taps are set).
  // topk: the tree width (1: chains).
  Eagle3Proposer(Backend& be, const EngineFile& file, Model& target, int max_batch, int max_k,
                 int topk = 1);

  bool proposes_trees() const override { return topk_ > 1; }
  void begin(int slot, const Admission& a) override;
  bool active(int slot) const override { return ready_[slot]; }
  void prompt_done(int slot, const std::vector<int32_t>& prompt, int first, int n, int row,
                   bool others_decoding) override;
  void start(int slot, SeqState& seq) override;

  void issue_propose(IterationContext& ctx, int k) override;
  void issue_after_accept(IterationContext& ctx) override;

  int draft_vocab() const { return draft_vocab_; }
  int topk() const { return topk_; }
  // The head's logits [n, draft_vocab] over a prompt run in KV slot 0 (the target's forward over
  // ids, then the head absorbing each row p with the token at p + 1, `next` after the last):
  // host memory, for tests.
  std::vector<float> prompt_logits(const std::vector<int32_t>& ids, int32_t next);

 private:
  // The layer over n rows: feature g [n, dim] (read before out is written) -> out [n, dim].
  void layer(const Rows& rows, int n, const float* g, float* out);
  // g [n, dim] = fc of the taps' rows [n, dim] each (tap t at taps[t]).
  void fuse(const float* const taps[3], int n, float* g);
  // logits [n, draft_vocab] of outputs x [n, dim].
  void head(const float* x, int n, float* logits);
  // The rows [n] of meta buffers tok_, pos_, slot_ (backend memory).
  Rows rows() const;
  // A dynamic tree of k nodes for each of B sequences (eagle3_tree.h), cur [B, D] holding their
  // last outputs.
  void propose_tree(IterationContext& ctx, int k, float* cur);

  Backend& be_;
  Model& target_;
  int dim_ = 0, ffn_ = 0, draft_vocab_ = 0, max_batch_ = 0, max_rows_ = 0, max_seq_ = 0;
  int topk_ = 1;
  float eps_ = 1e-6f;
  bool norm_before_residual_ = false;
  AttentionShape attn_;
  WeightView fc_[3], input_norm_, hidden_norm_, post_norm_, norm_, qkv_e_, qkv_h_, o_, gate_up_,
      down_, head_;
  std::unique_ptr<Eagle3Ops> ops_;
  std::vector<char> allowed_;  // [max_batch]: the request may use it (it reads the prompt)
  std::vector<char> pending_;  // [max_batch]: the prompt's last taps wait for the first token
  std::vector<char> ready_;    // [max_batch]: feat holds the sequence's last output
  KvCache kv_;
  BackendBuffer k_buf_, v_buf_, cos_, sin_;       // cache; RoPE [max_seq, head_dim / 2]
  BackendBuffer tokens_;                          // [draft_vocab] target id of each draft token
  BackendBuffer tok_, pos_, slot_, src_, last_;   // row metadata [max_rows]
  BackendBuffer kv_idx_, tree_base_, tree_bits_;  // tree rows' metadata [max_rows]
  BackendBuffer trees_;                           // [max_batch] Eagle3Tree
  BackendBuffer feat_;                            // [max_batch, dim]
  BackendBuffer pend_;                            // [max_batch, 3, dim]
  // Scratch, [max_rows, *]
  BackendBuffer a_[3], g_, e_, en_, gn_, qkv_, att_, x_, gu_, act_, tmp_, logits_;
};

// The registry's factory: the engine's draft heads where they are EAGLE-3's.
std::unique_ptr<Proposer> make_eagle3_proposer(const ProposerEnv& env);

}  // namespace trt_spec
