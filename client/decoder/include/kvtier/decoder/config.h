// ModelConfig: the shape of a Llama-style decoder, read from a Hugging Face
// config.json (the same field names, so SmolLM/TinyLlama-class checkpoints
// load unchanged), plus the named sizes the random-checkpoint tool writes.
// A key config.json leaves out takes Hugging Face's LlamaConfig default
// (MistralConfig's for model_type "mistral"); config.cc lists them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::decoder {

struct ModelConfig {
  uint32_t vocab_size = 256;
  uint32_t hidden_size = 256;
  uint32_t intermediate_size = 512;
  uint32_t num_hidden_layers = 2;
  uint32_t num_attention_heads = 4;
  uint32_t num_key_value_heads = 2;
  uint32_t head_dim = 64;  // config.json "head_dim", else hidden / heads
  uint32_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  // HF's attention_bias: q/k/v/o projections carry biases (Qwen2-style
  // checkpoints); mlp_bias: gate/up/down do.
  bool attention_bias = false;
  bool mlp_bias = false;
  // Mistral's attention window in tokens; 0: full attention.
  uint32_t sliding_window = 0;
  int32_t bos_token_id = -1;  // -1: none
  int32_t eos_token_id = -1;

  // Every size non-zero, heads divide evenly (GQA), head_dim even (RoPE).
  absl::Status Validate() const;
  std::string ToJson() const;  // config.json text (model_type "llama")
};

// Parses config.json text; `source` names it in errors.
absl::StatusOr<ModelConfig> ParseConfigJson(absl::string_view text, absl::string_view source);
absl::StatusOr<ModelConfig> LoadConfigFile(const std::string& path);

// Named sizes: "tiny" (tests: 2 layers x 256 hidden x 4 heads of 64 / 2 KV
// heads, vocab 256) and "124m" (12 layers x 768 hidden x 12 heads, SwiGLU 2048,
// vocab 50257 tied, ~124M parameters like GPT-2 small).
absl::StatusOr<ModelConfig> NamedConfig(absl::string_view name);

}  // namespace kvtier::decoder
