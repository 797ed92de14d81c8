// schema.cpp: ModelConfig validation and the engine tensor plan (schema.h).
#include "format/schema.h"

#include <algorithm>
#include <iterator>

#include "common/errors.h"

namespace trt_spec {

ModelConfig ModelConfig::from_json(const Json& j) {
  ModelConfig c;
  c.arch = j.at("arch").as_string();
  if (std::find(std::begin(kArchitectures), std::end(kArchitectures), c.arch) ==
      std::end(kArchitectures))
    throw EngineFileError("unsupported architecture '" + c.arch + "' in engine file");
  // Sizes are bounded far above any real model so that the products the loader forms from them
  // (qkv_dim, KV cache bytes) cannot overflow.
  auto size = [&j](const char* key, int64_t most) {
    const int64_t v = j.at(key).as_int();
    if (v <= 0 || v > most)
      throw EngineFileError("engine metadata: " + j.path() + "." + key + " is " +
                            std::to_string(v) + ", outside [1, " + std::to_string(most) + "]");
    return static_cast<int>(v);
  };
  c.n_layers = size("n_layers", 1 << 12);
  c.dim = size("dim", 1 << 20);
  c.n_heads = size("n_heads", 1 << 12);
  c.n_kv_heads = size("n_kv_heads", 1 << 12);
  c.head_dim = size("head_dim", 1 << 12);
  c.ffn_dim = size("ffn_dim", 1 << 22);
  c.vocab_size = size("vocab_size", 1 << 24);
  if (j.has("head_vocab")) {
    c.head_vocab = size("head_vocab", 1 << 24);
    if (c.head_vocab >= c.vocab_size)
      throw EngineFileError("engine metadata: " + j.path() + ".head_vocab is " +
                            std::to_string(c.head_vocab) + ", not below vocab_size " +
                            std::to_string(c.vocab_size));
  }
  const double theta = j.at("rope_theta").as_number(), eps = j.at("rms_eps").as_number();
  if (!(theta > 0 && theta < 1e30) || !(eps > 0 && eps < 1))
    throw EngineFileError("engine metadata: rope_theta must be in (0, 1e30) and rms_eps in (0, 1)");
  c.rope_theta = static_cast<float>(theta);
  c.rms_eps = static_cast<float>(eps);
  c.tied_embeddings = j.at("tied_embeddings").as_bool();
  c.qkv_bias = j.at("qkv_bias").as_bool();
  if (c.n_heads % c.n_kv_heads != 0 || c.head_dim % 2 != 0)
    throw EngineFileError("engine metadata: inconsistent model shape");
  return c;
}

std::vector<TensorSpec> engine_tensors(const ModelConfig& c) {
  const int64_t D = c.dim, V = c.vocab_size, F = c.ffn_dim, Q = c.qkv_dim();
  const int64_t attn = static_cast<int64_t>(c.n_heads) * c.head_dim;
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, int64_t rows, int64_t cols, std::vector<std::string> src) {
    out.push_back(TensorSpec{std::move(name), rows, cols, std::move(src)});
  };
  add("tok_embd.weight", V, D, {"tok_embd.weight"});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, D, {p + "attn_norm.weight"});
    add(p + "attn_qkv.weight", Q, D,
        {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"});
    if (c.qkv_bias)
      add(p + "attn_qkv.bias", 1, Q, {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"});
    add(p + "attn_output.weight", D, attn, {p + "attn_output.weight"});
    add(p + "ffn_norm.weight", 1, D, {p + "ffn_norm.weight"});
    add(p + "ffn_gate_up.weight", 2 * F, D, {p + "ffn_gate.weight", p + "ffn_up.weight"});
    add(p + "ffn_down.weight", D, F, {p + "ffn_down.weight"});
  }
  add("output_norm.weight", 1, D, {"output_norm.weight"});
  if (c.reduced_head())  // rows of the head (or of the tied table) picked by head_tokens
    add("output.weight", c.head_vocab, D,
        {c.tied_embeddings ? "tok_embd.weight" : "output.weight"});
  else if (!c.tied_embeddings)
    add("output.weight", V, D, {"output.weight"});
  return out;
}

}  // namespace trt_spec
