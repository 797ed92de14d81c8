// schema.h: the engine schema, defined once: the supported architectures, the model config
// keys, and the tensors an engine holds for a model (names, shapes, and the checkpoint tensors
// each is concatenated from). The runtime loads models by it (model.cpp); the Python builder and
// checkpoint readers get it from trt_spec._core (never a copy).
//
// Checkpoint tensor names are the GGUF convention (blk.N.attn_q.weight, ...), which the readers
// map Hugging Face names to. An engine fuses q/k/v into attn_qkv and gate/up into ffn_gate_up
// (one matrix product each); 1-D tensors (norms, biases) are stored as [1, n], f32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/json.h"

namespace trt_spec {

constexpr const char* kArchitectures[] = {"qwen2", "llama"};

// Config keys and their JSON types ("str", "int", "float", "bool").
struct ConfigKey {
  const char* name;
  const char* type;
};
constexpr ConfigKey kConfigKeys[] = {
    {"arch", "str"},      {"n_layers", "int"},         {"dim", "int"},
    {"n_heads", "int"},   {"n_kv_heads", "int"},       {"head_dim", "int"},
    {"ffn_dim", "int"},   {"vocab_size", "int"},       {"rope_theta", "float"},
    {"rms_eps", "float"}, {"tied_embeddings", "bool"}, {"qkv_bias", "bool"},
};

// Optional config keys (engine format version 3, engine_file.h):
//   head_vocab: the output head holds the rows of this many tokens only (a draft's reduced
//   vocabulary: its most frequent tokens), listed in increasing id order by the model's
//   "head_tokens" array (metadata models.<role>.head_tokens); the head's logits of every other
//   token are -inf (model.h). The engine then stores output.weight [head_vocab, dim] whether or
//   not the checkpoint ties it to the embedding table.
constexpr ConfigKey kOptionalConfigKeys[] = {{"head_vocab", "int"}};

struct ModelConfig {
  std::string arch;  // one of kArchitectures
  int n_layers = 0, dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
  int vocab_size = 0;
  int head_vocab = 0;  // 0: the head covers the whole vocabulary
  float rope_theta = 10000.0f, rms_eps = 1e-6f;
  bool tied_embeddings = false, qkv_bias = false;

  int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  bool reduced_head() const { return head_vocab > 0; }
  int head_rows() const { return reduced_head() ? head_vocab : vocab_size; }  // output.weight rows
  static ModelConfig from_json(const Json& j);  // validates; throws EngineFileError
};

// One engine tensor of a model: [rows, cols] (1-D tensors: rows 1), made of the checkpoint
// tensors `sources` concatenated along rows.
struct TensorSpec {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::vector<std::string> sources;
};

// Every engine tensor of a model with config c, in file order.
std::vector<TensorSpec> engine_tensors(const ModelConfig& c);

}  // namespace trt_spec
