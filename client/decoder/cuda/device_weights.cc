// Upload (fp32 host -> staging -> converted on the device) and hash-seeded
// random init of DeviceWeights.
#include "cuda/device_weights.h"

#include "cuda/cuda_util.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder::cuda {

struct DeviceWeights::Slot {
  void** dst;
  int64_t n;
  bool matrix;  // type_; else fp32
  bool ones;    // a norm: random init starts it at 1
  const std::vector<float>* host;
};

std::vector<DeviceWeights::Slot> DeviceWeights::Slots(const ModelConfig& c, const ModelWeights* w) {
  const int64_t h = c.hidden_size, q = int64_t(c.num_attention_heads) * c.head_dim,
                kv = int64_t(c.num_key_value_heads) * c.head_dim, f = c.intermediate_size;
  auto host = [&](const std::vector<float>& v) { return w ? &v : nullptr; };
  static const LayerWeights kNoLayer;
  std::vector<Slot> s;
  s.push_back({&embed_, int64_t(c.vocab_size) * h, true, false, w ? &w->embed : nullptr});
  layers_.resize(c.num_hidden_layers);
  for (uint32_t i = 0; i < c.num_hidden_layers; ++i) {
    DeviceLayer& d = layers_[i];
    const LayerWeights& l = w ? w->layers[i] : kNoLayer;
    auto fp32 = [](float** p) { return reinterpret_cast<void**>(p); };
    s.push_back({fp32(&d.input_norm), h, false, true, host(l.input_norm)});
    s.push_back({&d.q, q * h, true, false, host(l.q_proj)});
    s.push_back({&d.k, kv * h, true, false, host(l.k_proj)});
    s.push_back({&d.v, kv * h, true, false, host(l.v_proj)});
    s.push_back({&d.o, h * q, true, false, host(l.o_proj)});
    s.push_back({fp32(&d.post_norm), h, false, true, host(l.post_norm)});
    s.push_back({&d.gate, f * h, true, false, host(l.gate_proj)});
    s.push_back({&d.up, f * h, true, false, host(l.up_proj)});
    s.push_back({&d.down, h * f, true, false, host(l.down_proj)});
    if (c.attention_bias) {
      s.push_back({fp32(&d.q_bias), q, false, false, host(l.q_bias)});
      s.push_back({fp32(&d.k_bias), kv, false, false, host(l.k_bias)});
      s.push_back({fp32(&d.v_bias), kv, false, false, host(l.v_bias)});
      s.push_back({fp32(&d.o_bias), h, false, false, host(l.o_bias)});
    }
    if (c.mlp_bias) {
      s.push_back({fp32(&d.gate_bias), f, false, false, host(l.gate_bias)});
      s.push_back({fp32(&d.up_bias), f, false, false, host(l.up_bias)});
      s.push_back({fp32(&d.down_bias), h, false, false, host(l.down_bias)});
    }
  }
  s.push_back({reinterpret_cast<void**>(&final_norm_), h, false, true, w ? &w->final_norm : nullptr});
  if (!c.tie_word_embeddings)
    s.push_back({&lm_head_, int64_t(c.vocab_size) * h, true, false, w ? &w->lm_head : nullptr});
  return s;
}

absl::Status DeviceWeights::Alloc(void** p, uint64_t bytes) {
  KVTIER_CUDA_OK(cudaMalloc(p, bytes));
  allocations_.push_back(*p);
  bytes_ += bytes;
  return absl::OkStatus();
}

DeviceWeights::~DeviceWeights() {
  for (void* p : allocations_) cudaFree(p);
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const ModelWeights& w, Elem type,
                                                                     cudaStream_t s) {
  std::unique_ptr<DeviceWeights> d(new DeviceWeights(type));
  DeviceBuffer staging;  // fp32 copy of one tensor, converted from there
  for (const Slot& slot : d->Slots(w.config, &w)) {
    if (slot.host->size() != uint64_t(slot.n))
      return absl::InvalidArgumentError(absl::StrCat("device weights: a tensor has ", slot.host->size(),
                                                     " elements, expected ", slot.n));
    const Elem t = slot.matrix ? type : Elem::kF32;
    RETURN_IF_ERROR(d->Alloc(slot.dst, uint64_t(slot.n) * ElemBytes(t)));
    if (t == Elem::kF32) {
      KVTIER_CUDA_OK(cudaMemcpy(*slot.dst, slot.host->data(), slot.n * sizeof(float), cudaMemcpyHostToDevice));
      continue;
    }
    RETURN_IF_ERROR(staging.Reserve(slot.n * sizeof(float)));
    KVTIER_CUDA_OK(cudaMemcpy(staging.get(), slot.host->data(), slot.n * sizeof(float), cudaMemcpyHostToDevice));
    KVTIER_CUDA_OK(ConvertF32(staging.get<float>(), *slot.dst, t, slot.n, s));
    KVTIER_CUDA_OK(cudaStreamSynchronize(s));  // staging is reused by the next tensor
  }
  return d;
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Random(const ModelConfig& c, Elem type,
                                                                     uint64_t seed, float std,
                                                                     cudaStream_t s) {
  std::unique_ptr<DeviceWeights> d(new DeviceWeights(type));
  uint64_t index = 0;
  for (const Slot& slot : d->Slots(c, nullptr)) {
    const Elem t = slot.matrix ? type : Elem::kF32;
    RETURN_IF_ERROR(d->Alloc(slot.dst, uint64_t(slot.n) * ElemBytes(t)));
    if (slot.ones) {
      KVTIER_CUDA_OK(FillConstF32(static_cast<float*>(*slot.dst), slot.n, 1.0f, s));
    } else {
      KVTIER_CUDA_OK(FillNormal(*slot.dst, t, slot.n, seed, index, std, s));
    }
    ++index;
  }
  KVTIER_CUDA_OK(cudaStreamSynchronize(s));
  return d;
}

}  // namespace kvtier::decoder::cuda
