// DeviceWeights: a Llama-style model's tensors in GPU memory. Matrices
// (embeddings, projections, lm_head) in one element type (fp32, fp16 or
// bf16, converted on upload); norms and biases stay fp32 (tiny). Built by
// uploading ModelWeights or drawn at random on the device from a seed.
// Owns its memory. Not thread-safe to build; read-only afterwards.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cuda/cuda_ops.h"
#include "kvtier/decoder/weights.h"

namespace kvtier::decoder::cuda {

struct DeviceLayer {
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  void* q = nullptr;  // [out][in] like the host tensors
  void* k = nullptr;
  void* v = nullptr;
  void* o = nullptr;
  void* gate = nullptr;
  void* up = nullptr;
  void* down = nullptr;
  float* q_bias = nullptr;  // null when the model has none
  float* k_bias = nullptr;
  float* v_bias = nullptr;
  float* o_bias = nullptr;
  float* gate_bias = nullptr;
  float* up_bias = nullptr;
  float* down_bias = nullptr;
};

class DeviceWeights {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const ModelWeights& w, Elem type,
                                                               cudaStream_t s);
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Random(const ModelConfig& c, Elem type,
                                                               uint64_t seed, float std,
                                                               cudaStream_t s);
  ~DeviceWeights();

  Elem type() const { return type_; }
  uint64_t bytes() const { return bytes_; }
  const void* embed() const { return embed_; }
  const void* lm_head() const { return lm_head_ != nullptr ? lm_head_ : embed_; }
  const float* final_norm() const { return final_norm_; }
  const DeviceLayer& layer(uint32_t l) const { return layers_[l]; }

 private:
  struct Slot;
  explicit DeviceWeights(Elem type) : type_(type) {}
  // Every tensor in a fixed order (its index seeds the random init), with
  // where it goes, its size and the host copy when `w` is given.
  std::vector<Slot> Slots(const ModelConfig& c, const ModelWeights* w);
  absl::Status Alloc(void** p, uint64_t bytes);

  Elem type_;
  uint64_t bytes_ = 0;
  std::vector<void*> allocations_;
  void* embed_ = nullptr;
  void* lm_head_ = nullptr;  // null when tied
  float* final_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;
};

}  // namespace kvtier::decoder::cuda
