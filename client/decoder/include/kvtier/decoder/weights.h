// ModelWeights: every tensor of a Llama-style decoder in fp32, loaded from a
// Hugging Face checkpoint directory (config.json + model.safetensors, or the
// shards named by model.safetensors.index.json), or made at random for tests
// and benchmarks. Linear weights keep HF's [out, in] row-major shape.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/decoder/config.h"
#include "kvtier/decoder/safetensors.h"

namespace kvtier::decoder {

struct LayerWeights {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> q_proj;      // [heads * head_dim, hidden]
  std::vector<float> k_proj;      // [kv_heads * head_dim, hidden]
  std::vector<float> v_proj;      // [kv_heads * head_dim, hidden]
  std::vector<float> o_proj;      // [hidden, heads * head_dim]
  std::vector<float> post_norm;   // [hidden]
  std::vector<float> gate_proj;   // [intermediate, hidden]
  std::vector<float> up_proj;     // [intermediate, hidden]
  std::vector<float> down_proj;   // [hidden, intermediate]
  // With config.attention_bias / mlp_bias (else empty): [out] of each projection.
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
  std::vector<float> gate_bias, up_bias, down_bias;
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embed;       // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [vocab, hidden]; empty when tied to embed

  const float* LmHead() const { return lm_head.empty() ? embed.data() : lm_head.data(); }
  uint64_t ParameterCount() const;
};

// Loads `dir`/config.json and the safetensors weights (fp32, fp16 or bf16).
// Errors name the file and tensor: missing tensor, shape mismatch, bad dtype,
// or a projection bias the config does not declare (attention_bias/mlp_bias).
// Other tensors the model does not use (rotary inv_freq buffers,
// position_ids, ...) are skipped whatever their dtype.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadCheckpoint(const std::string& dir);

// Weights drawn from N(0, init_std) (norms = 1), reproducible from `seed`.
std::unique_ptr<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed,
                                            float init_std = 0.02f);

// Writes config.json and model.safetensors (tensors stored as `dtype`) to
// `dir`, creating it.
absl::Status WriteCheckpoint(const std::string& dir, const ModelWeights& weights, TensorDtype dtype);

}  // namespace kvtier::decoder
