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
  c.n_layers = static_cast<int>(j.at("n_layers").as_int());
  c.dim = static_cast<int>(j.at("dim").as_int());
  c.n_heads = static_cast<int>(j.at("n_heads").as_int());
  c.n_kv_heads = static_cast<int>(j.at("n_kv_heads").as_int());
  c.head_dim = static_cast<int>(j.at("head_dim").as_int());
  c.ffn_dim = static_cast<int>(j.at("ffn_dim").as_int());
  c.vocab_size = static_cast<int>(j.at("vocab_size").as_int());
  c.rope_theta = static_cast<float>(j.at("rope_theta").as_number());
  c.rms_eps = static_cast<float>(j.at("rms_eps").as_number());
  c.tied_embeddings = j.at("tied_embeddings").as_bool();
  c.qkv_bias = j.at("qkv_bias").as_bool();
  if (c.n_layers <= 0 || c.dim <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.ffn_dim <= 0 || c.vocab_size <= 0 || c.n_heads % c.n_kv_heads != 0 || c.head_dim % 2 != 0)
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
  if (!c.tied_embeddings) add("output.weight", V, D, {"output.weight"});
  return out;
}

}  // namespace trt_spec
