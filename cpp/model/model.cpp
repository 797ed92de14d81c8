// model.cpp: weights lookup, cache/scratch allocation and the forward pass (model.h).
#include "model/model.h"

#include <cmath>
#include <map>

#include "common/errors.h"

namespace trt_spec {

WeightView Model::weight(const EngineFile& file, const std::string& name, int64_t rows,
                         int64_t cols, bool matmul) {
  const TensorEntry& e = file.tensor(role_, name);
  if (e.rows != rows || e.cols != cols)
    throw EngineFileError("tensor " + role_ + "/" + name + " has shape [" + std::to_string(e.rows) +
                          ", " + std::to_string(e.cols) + "], expected [" + std::to_string(rows) +
                          ", " + std::to_string(cols) + "]");
  if (rows == 1 && e.type != WeightType::F32)
    throw EngineFileError("tensor " + role_ + "/" + name + " must be f32");
  weight_bytes_ += e.bytes;
  return import(file, e, matmul);
}

namespace {

// The values of a random weight (an engine model with random_weights, kernels/random_fill.h),
// uniform and in the ranges that keep activations and logits realistic through every layer:
// norms about 1, small biases, an embedding (and a tied head) giving logits of about 3, and
// projections of standard deviation 1 / sqrt(cols).
RandomFill random_fill_of(const TensorEntry& e, const ModelConfig& cfg) {
  constexpr float kSqrt3 = 1.7320508f;  // a uniform [-s, s] has standard deviation s / sqrt(3)
  const auto ends_with = [&](const std::string& tail) {
    return e.name.size() >= tail.size() &&
           e.name.compare(e.name.size() - tail.size(), tail.size(), tail) == 0;
  };
  RandomFill f;
  f.key = e.random_key;
  if (ends_with("norm.weight")) {
    f.offset = 1.0f;
    f.scale = 0.1f * kSqrt3;
  } else if (ends_with(".bias")) {
    f.scale = 0.1f * kSqrt3;
  } else if (e.name == "tok_embd.weight") {
    f.scale = 3.0f * kSqrt3 / std::sqrt(static_cast<float>(cfg.dim));
  } else {
    f.scale = kSqrt3 / std::sqrt(static_cast<float>(e.cols));
  }
  return f;
}

}  // namespace

WeightView Model::import(const EngineFile& file, const TensorEntry& e, bool matmul) {
  if (e.random) return be_.random_weight(e.type, e.rows, e.cols, random_fill_of(e, cfg_), matmul);
  const WeightView host = e.view(file.data());
  const WeightView w = matmul ? be_.import_matmul_weight(host) : be_.import_weight(host);
  if (w.data != host.data) file.drop_pages(host.data, e.bytes);  // (re-read if used again)
  return w;
}

Model::Model(const EngineFile& file, const std::string& role, Backend& backend, ModelLimits limits)
    : role_(role), be_(backend), limits_(limits) {
  cfg_ = ModelConfig::from_json(file.meta().at("models").at(role).at("config"));
  // The tensors by the schema (format/schema.h): every one of them must be in the file.
  std::map<std::string, WeightView> w;
  // Matrices other than the embedding table are read by the matmul only (the backend may keep
  // them in its own layout); with tied embeddings the head is imported a second time for it.
  for (const TensorSpec& t : engine_tensors(cfg_))
    w[t.name] = weight(file, t.name, t.rows, t.cols, t.rows > 1 && t.name != "tok_embd.weight");
  for (const auto& [name, e] : file.tensors(role_))
    if (!w.count(name))
      throw EngineFileError("tensor " + role_ + "/" + name + " is not part of a " + cfg_.arch +
                            " model's schema");
  tok_embd_ = w.at("tok_embd.weight");
  // The embedding table is read a row per token: only the rows in use need to stay resident
  // (on the CPU the table is read in place; elsewhere it was copied and is dropped already).
  file.drop_pages(tok_embd_.data, file.tensor(role_, "tok_embd.weight").bytes);
  output_norm_ = w.at("output_norm.weight");
  output_ = cfg_.tied_embeddings && !cfg_.reduced_head()
                ? import(file, file.tensor(role_, "tok_embd.weight"), true)
                : w.at("output.weight");
  load_head_tokens(file);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm = w.at(p + "attn_norm.weight");
    L.attn_qkv = w.at(p + "attn_qkv.weight");
    if (cfg_.qkv_bias) L.attn_qkv_bias = w.at(p + "attn_qkv.bias");
    L.attn_o = w.at(p + "attn_output.weight");
    L.ffn_norm = w.at(p + "ffn_norm.weight");
    L.ffn_gate_up = w.at(p + "ffn_gate_up.weight");
    L.ffn_down = w.at(p + "ffn_down.weight");
    layers_.push_back(L);
  }
  attn_ = {cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim,
           1.0f / std::sqrt(static_cast<float>(cfg_.head_dim))};

  // KV cache and RoPE tables.
  kv_ = KvCache{nullptr,       nullptr,         limits_.kv_type, limits_.max_batch,
                cfg_.n_layers, cfg_.n_kv_heads, limits_.max_seq, cfg_.head_dim};
  k_buf_ = BackendBuffer(be_, kv_bytes() / 2);
  v_buf_ = BackendBuffer(be_, kv_bytes() / 2);
  kv_.k = k_buf_.as<void>();
  kv_.v = v_buf_.as<void>();
  const int half = cfg_.head_dim / 2;
  std::vector<float> c(static_cast<size_t>(limits_.max_seq) * half), s(c.size());
  for (int i = 0; i < half; ++i) {
    // Same float32 arithmetic as the reference implementations.
    float inv_freq = 1.0f / std::pow(cfg_.rope_theta,
                                     static_cast<float>(2 * i) / static_cast<float>(cfg_.head_dim));
    for (int p = 0; p < limits_.max_seq; ++p) {
      double angle = static_cast<double>(static_cast<float>(p) * inv_freq);
      c[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
      s[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  cos_ = BackendBuffer(be_, c.size() * sizeof(float));
  sin_ = BackendBuffer(be_, s.size() * sizeof(float));
  be_.upload(cos_.as<void>(), c.data(), c.size() * sizeof(float));
  be_.upload(sin_.as<void>(), s.data(), s.size() * sizeof(float));

  const size_t R = static_cast<size_t>(limits_.max_rows), D = cfg_.dim, F = cfg_.ffn_dim;
  auto scratch = [&](size_t per_row) { return BackendBuffer(be_, R * per_row * sizeof(float)); };
  x_ = scratch(D);
  h_ = scratch(D);
  qkv_ = scratch(cfg_.qkv_dim());
  att_ = scratch(static_cast<size_t>(cfg_.n_heads) * cfg_.head_dim);
  proj_ = scratch(D);
  gate_up_ = scratch(2 * F);
  act_ = scratch(F);
  sel_ = scratch(D);
}

void Model::load_head_tokens(const EngineFile& file) {
  head_tokens_.resize(cfg_.head_rows());
  if (!cfg_.reduced_head()) {
    for (int i = 0; i < cfg_.vocab_size; ++i) head_tokens_[i] = i;
    return;
  }
  const Json list = file.meta().at("models").at(role_).at("head_tokens");
  if (list.size() != static_cast<size_t>(cfg_.head_vocab))
    throw EngineFileError(list.path() + " lists " + std::to_string(list.size()) +
                          " tokens for a head_vocab of " + std::to_string(cfg_.head_vocab));
  std::vector<int32_t> index(cfg_.vocab_size, -1);
  for (int i = 0; i < cfg_.head_vocab; ++i) {
    const int64_t t = list.at(i).as_int();
    if (t < 0 || t >= cfg_.vocab_size || (i > 0 && t <= head_tokens_[i - 1]))
      throw EngineFileError(list.path() + " must list token ids in [0, " +
                            std::to_string(cfg_.vocab_size) + ") in increasing order (entry " +
                            std::to_string(i) + " is " + std::to_string(t) + ")");
    head_tokens_[i] = static_cast<int32_t>(t);
    index[t] = i;
  }
  head_index_ = BackendBuffer(be_, index.size() * sizeof(int32_t));
  be_.upload(head_index_.as<void>(), index.data(), index.size() * sizeof(int32_t));
  head_logits_ =
      BackendBuffer(be_, static_cast<size_t>(limits_.max_rows) * cfg_.head_vocab * sizeof(float));
}

void Model::set_taps(const std::vector<int>& layers) {
  if (!tap_layers_.empty()) {
    if (layers != tap_layers_) throw InvalidArgument("model taps: already set to other layers");
    return;
  }
  for (int l : layers)
    if (l < 0 || l > cfg_.n_layers)
      throw InvalidArgument("model taps: layer " + std::to_string(l) + " of a model of " +
                            std::to_string(cfg_.n_layers) + " layers");
  const size_t R = limits_.max_rows;
  std::vector<int32_t> id(R);
  for (size_t i = 0; i < R; ++i) id[i] = static_cast<int32_t>(i);
  tap_rows_ = BackendBuffer(be_, R * sizeof(int32_t));
  be_.upload(tap_rows_.as<void>(), id.data(), R * sizeof(int32_t));
  for (size_t t = 0; t < layers.size(); ++t) taps_.emplace_back(be_, R * cfg_.dim * sizeof(float));
  tap_layers_ = layers;
}

size_t kv_cache_bytes(const ModelConfig& cfg, const ModelLimits& limits) {
  return 2 * static_cast<size_t>(limits.max_batch) * cfg.n_layers * cfg.n_kv_heads *
         limits.max_seq * cfg.head_dim * kv_type_bytes(limits.kv_type);
}

size_t Model::kv_bytes() const {
  return kv_cache_bytes(cfg_, limits_);
}

void Model::forward(const Rows& rows, int n, const int32_t* logit_rows, int n_logits,
                    float* logits_out, float* hidden_out) {
  if (n <= 0 || n > limits_.max_rows || n_logits < 0 || n_logits > n)
    throw InvalidArgument("forward: bad row count");
  be_.begin_forward(n);
  try {
    issue_forward(rows, n, logit_rows, n_logits, logits_out, hidden_out);
  } catch (...) {
    be_.end_forward(false);
    throw;
  }
  be_.end_forward(true);
}

void Model::issue_forward(const Rows& rows, int n, const int32_t* logit_rows, int n_logits,
                          float* logits_out, float* hidden_out) {
  float *x = x_.as<float>(), *h = h_.as<float>(), *qkv = qkv_.as<float>(), *att = att_.as<float>(),
        *proj = proj_.as<float>(), *gate_up = gate_up_.as<float>(), *act = act_.as<float>(),
        *sel = sel_.as<float>();
  be_.embed(tok_embd_, rows.tokens, n, x);  // [n, D]
  const auto taps_at = [&](int l) {         // [n, D] into the taps of layer l
    for (size_t t = 0; t < tap_layers_.size(); ++t)
      if (tap_layers_[t] == l) be_.gather_rows(x, tap_rows_.as<int32_t>(), n, cfg_.dim, tap(t));
  };
  // Five fused ops per layer (backend.h); h, proj and act are the default ops' scratch.
  for (int l = 0; l < cfg_.n_layers; ++l) {
    taps_at(l);
    const Layer& L = layers_[l];
    be_.qkv_projection(x, L.attn_norm, cfg_.rms_eps, L.attn_qkv, L.attn_qkv_bias, rows, n, attn_,
                       cos_.as<float>(), sin_.as<float>(), kv_, l, qkv, h);  // [n, qkv_dim]
    be_.attention(qkv, rows, n, attn_, kv_, l, att);  // [n, heads * head_dim]
    be_.linear_residual(L.attn_o, att, n, x, proj);   // x += att @ Wo^T
    be_.norm_linear(x, nullptr, L.ffn_norm, cfg_.rms_eps, L.ffn_gate_up, WeightView{}, n, gate_up,
                    h);                                                // [n, 2 F]
    be_.swiglu_linear_residual(L.ffn_down, gate_up, n, x, act, proj);  // x += swiglu @ Wd^T
  }
  taps_at(cfg_.n_layers);
  if (n_logits == 0) return;
  if (hidden_out) {  // [n_logits, D]: the selected rows, normed
    be_.gather_rows(x, logit_rows, n_logits, cfg_.dim, sel);
    be_.rmsnorm(sel, output_norm_, cfg_.rms_eps, n_logits, cfg_.dim, hidden_out);
  }
  // The selected rows' final norm and the head: [n_logits, V].
  if (!cfg_.reduced_head()) {
    be_.norm_linear(x, logit_rows, output_norm_, cfg_.rms_eps, output_, WeightView{}, n_logits,
                    logits_out, sel);
    return;
  }
  float* head = head_logits_.as<float>();  // [n_logits, head_vocab]
  be_.norm_linear(x, logit_rows, output_norm_, cfg_.rms_eps, output_, WeightView{}, n_logits, head,
                  sel);
  be_.expand_columns(head, cfg_.head_vocab, head_index_.as<int32_t>(), n_logits, cfg_.vocab_size,
                     logits_out);  // [n_logits, vocab], -inf outside the head
}

}  // namespace trt_spec
