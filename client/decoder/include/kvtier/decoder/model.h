// Model: a Llama-style decoder (RMSNorm, RoPE, GQA attention on the paged KV
// cache, SwiGLU MLP) over ModelWeights. One Forward call runs any mix of
// sequences: a prefill chunk per sequence, or one token for each of many
// sequences (a continuous-batching decode step); linear layers run once over
// all their tokens. Attention and K/V scatter are the kvtier kernels.
//
// Thread-safety: not thread-safe (scratch buffers are members).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/decoder/kv_cache.h"
#include "kvtier/decoder/weights.h"
#include "kvtier/layout.h"

namespace kvtier::decoder {

// Tokens to append to one sequence in a Forward call.
struct ForwardChunk {
  SeqId seq = 0;
  absl::Span<const uint32_t> tokens;
};

// Called by Forward before layer `l` first touches the KV pages (K/V scatter,
// then attention): a layer-wise restore blocks there until layer l of the
// restored pages is in the arena. A non-OK status aborts the pass.
using LayerGate = std::function<absl::Status(uint32_t layer)>;

// The page layout of a model's KV cache: one page = tokens_per_page tokens
// of every layer's K and V.
Layout KvLayoutFor(const ModelConfig& config, uint32_t tokens_per_page, Dtype dtype);

// A forward pass on a device (device.h makes the CUDA one). Model::Forward has reserved the pages of every
// chunk's sequence before calling it and commits them after an OK return.
// Not thread-safe (one decoder thread).
class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  // `start[i]`: tokens already cached for chunks[i]'s sequence. Writes logits
  // exactly as Model::Forward documents ([chunks][vocab], or with
  // `all_logits` [total tokens][vocab]), into host memory.
  virtual absl::Status Forward(absl::Span<const ForwardChunk> chunks,
                               absl::Span<const uint32_t> start, bool all_logits,
                               std::vector<float>* logits) = 0;
  // e.g. "cuda:0 NVIDIA H200, weights bf16, cuBLAS".
  virtual std::string Describe() const = 0;
};

class Model {
 public:
  // `weights` and `cache` are borrowed and must outlive the model; the
  // cache's layout must match the model (layers, KV heads, head_dim).
  // With `device`, Forward runs its layers there (device.h); the cache
  // bookkeeping stays here.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelWeights* weights,
                                                      PagedKvCache* cache,
                                                      std::unique_ptr<DeviceForward> device = nullptr);
  ~Model();

  const ModelConfig& config() const { return w_.config; }
  PagedKvCache& cache() { return cache_; }
  // The device backend; null on the CPU path.
  DeviceForward* device() const { return device_.get(); }

  // Appends each chunk's tokens to its sequence: computes their K/V into the
  // cache (positions continue after the cached tokens) and writes logits to
  // `logits`: [chunks][vocab] for each chunk's last token, or with
  // `all_logits` [total tokens][vocab] in chunk order. A sequence may appear
  // in at most one chunk. On error the cache lengths are unchanged. `gate`,
  // when set, runs before each layer's use of the cache (on a device: for
  // every layer before the pass).
  absl::Status Forward(absl::Span<const ForwardChunk> chunks, std::vector<float>* logits,
                       bool all_logits = false, const LayerGate& gate = nullptr);

 private:
  Model(const ModelWeights* w, PagedKvCache* cache, std::unique_ptr<DeviceForward> device);
  absl::Status RunLayers(absl::Span<const ForwardChunk> chunks, bool all_logits,
                         const LayerGate& gate, std::vector<float>* logits);
  absl::Status CheckChunks(absl::Span<const ForwardChunk> chunks);
  absl::Status Layer(uint32_t l, absl::Span<const ForwardChunk> chunks, const LayerGate& gate);
  absl::Status Attention(uint32_t l, absl::Span<const ForwardChunk> chunks);
  absl::Status Decode(const kernels::PagedKv& kv, absl::Span<const ForwardChunk> chunks);
  absl::Status Prefill(const kernels::PagedKv& kv, absl::Span<const ForwardChunk> chunks);
  void Logits(absl::Span<const ForwardChunk> chunks, bool all, std::vector<float>* logits);
  kernels::Workspace Scratch(size_t bytes);

  const ModelWeights& w_;
  PagedKvCache& cache_;
  std::unique_ptr<DeviceForward> device_;
  // Per-call scratch, reused across calls: [tokens][...] rows.
  int rows_ = 0;
  std::vector<uint32_t> positions_;  // of every token
  std::vector<uint32_t> start_;      // cached length of each chunk's sequence
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_;
  std::vector<int32_t> tables_, lens_;
  std::vector<float> rope_cos_, rope_sin_;  // of positions_, built once per call
  std::vector<uint8_t> ws_;
};

}  // namespace kvtier::decoder
