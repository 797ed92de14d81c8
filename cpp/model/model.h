// model.h: one decoder-only transformer (Qwen2 / Llama family) as a sequence of backend ops.
//
// The model owns its backend-resident weights, KV cache and scratch, all allocated once at
// load for max_rows token rows per forward and max_batch KV slots. forward() runs any number
// of rows (prefill, one decode token, the k+1 verify rows of a draft chain or tree, several
// sequences) described by row metadata in backend memory (backend.h Rows).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/engine_file.h"
#include "format/schema.h"

namespace trt_spec {

struct ModelLimits {
  int max_seq = 0;               // positions per KV slot
  int max_batch = 1;             // KV slots
  int max_rows = 0;              // token rows per forward
  KvType kv_type = KvType::F32;  // KV cache element type
};

// Bytes of a model's KV cache (k and v, limits.kv_type elements) for these limits.
size_t kv_cache_bytes(const ModelConfig& cfg, const ModelLimits& limits);

class Model {
 public:
  Model(const EngineFile& file, const std::string& role, Backend& backend, ModelLimits limits);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ModelLimits& limits() const { return limits_; }
  size_t weight_bytes() const { return weight_bytes_; }
  size_t kv_bytes() const;

  // n rows (backend memory). Writes logits [n_logits, vocab] for the rows listed in
  // logit_rows [n_logits] (backend memory) to logits_out. With a reduced head (ModelConfig
  // head_vocab) the logits of the tokens outside it are -inf: no sampling rule draws them.
  // hidden_out (optional): the same rows' final hidden states [n_logits, dim], after the final
  // norm, as the head reads them (what feature-level draft heads read: Medusa).
  void forward(const Rows& rows, int n, const int32_t* logit_rows, int n_logits, float* logits_out,
               float* hidden_out = nullptr);

  // The tokens the head has rows for, in increasing id order (every id without a reduced head).
  const std::vector<int32_t>& head_tokens() const { return head_tokens_; }

  // Taps: every forward also copies the residual stream entering each listed layer (a layer id
  // of n_layers: after the last layer, before the final norm) of all its rows into tap(t)
  // [max_rows, dim], t the layer's index in the list (what EAGLE-3 heads read). Set once,
  // before the forwards that need them; a second list must equal the first.
  void set_taps(const std::vector<int>& layers);
  const std::vector<int>& tap_layers() const { return tap_layers_; }
  float* tap(int t) const { return taps_[t].as<float>(); }
  // 0, 1, .. max_rows - 1 in backend memory (row lists of whole passes), once taps are set.
  const int32_t* row_ids() const { return tap_rows_.as<int32_t>(); }
  // The token embedding table [vocab, dim] (a feature-level draft head shares it).
  const WeightView& embedding() const { return tok_embd_; }

  KvCache& kv() { return kv_; }

 private:
  struct Layer {
    WeightView attn_norm, attn_qkv, attn_qkv_bias, attn_o, ffn_norm, ffn_gate_up, ffn_down;
  };
  WeightView weight(const EngineFile& file, const std::string& name, int64_t rows, int64_t cols,
                    bool matmul);
  // The backend's view of one tensor (for the matmul, or any op); where the backend copied it
  // into its own memory, the file's pages of it are dropped from the resident set.
  WeightView import(const EngineFile& file, const TensorEntry& e, bool matmul);
  // forward()'s ops, between the backend's begin_forward and end_forward.
  void issue_forward(const Rows& rows, int n, const int32_t* logit_rows, int n_logits,
                     float* logits_out, float* hidden_out);
  // head_tokens_ (and with a reduced head, its index and logits buffers) from the metadata.
  void load_head_tokens(const EngineFile& file);

  std::string role_;
  Backend& be_;
  ModelConfig cfg_;
  ModelLimits limits_;
  AttentionShape attn_;
  WeightView tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  std::vector<int32_t> head_tokens_;  // [head_rows]
  // A reduced head: its logits [max_rows, head_vocab] and, per token id, its head row or -1
  // ([vocab], Backend::expand_columns).
  BackendBuffer head_logits_, head_index_;
  size_t weight_bytes_ = 0;
  KvCache kv_;
  BackendBuffer k_buf_, v_buf_;
  BackendBuffer cos_, sin_;  // [max_seq, head_dim / 2]
  std::vector<int> tap_layers_;
  std::vector<BackendBuffer> taps_;  // [taps] of [max_rows, dim]
  BackendBuffer tap_rows_;           // 0, 1, .. max_rows - 1
  // Scratch, [max_rows, *]
  BackendBuffer x_, h_, qkv_, att_, proj_, gate_up_, act_, sel_;
};

}  // namespace trt_spec
