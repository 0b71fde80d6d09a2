// CudaForward: the decoder's forward pass on one GPU (DeviceForward). Dense
// layers are cuBLAS GEMMs (weights fp32/fp16/bf16, fp32 accumulation and
// fp32 activations between layers); attention and the K/V scatter are the
// kvtier CUDA kernels on the paged arena, which lives in GPU memory and is
// the same memory kvtierd GETs into and PUTs from. One stream; every pass
// ends synchronized (logits copied to the host), so a PUT right after a
// Forward reads finished pages.
//
// Thread-safety: not thread-safe; call from the thread that created it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/device_weights.h"
#include "kvtier/decoder/device.h"

namespace kvtier::decoder::cuda {

class CudaForward : public DeviceForward {
 public:
  static absl::StatusOr<std::unique_ptr<CudaForward>> Create(const ModelWeights& weights,
                                                             PagedKvCache& cache,
                                                             const CudaForwardOptions& options);
  ~CudaForward() override;

  absl::Status Forward(absl::Span<const ForwardChunk> chunks, absl::Span<const uint32_t> start,
                       bool all_logits, std::vector<float>* logits) override;
  std::string Describe() const override { return describe_; }

 private:
  CudaForward(const ModelConfig& c, PagedKvCache& cache, const CudaForwardOptions& o)
      : c_(c), cache_(cache), options_(o) {}
  absl::Status Init(const ModelWeights& weights);
  // One pass over every layer; appends logits (all rows, or each chunk's
  // last) to `logits` when `want_logits`.
  absl::Status Pass(absl::Span<const ForwardChunk> chunks, absl::Span<const uint32_t> start,
                    bool want_logits, bool all_logits, std::vector<float>* logits);
  absl::Status Reserve(int rows);
  absl::Status UploadIndices(absl::Span<const ForwardChunk> chunks, absl::Span<const uint32_t> start);
  absl::Status Layer(uint32_t l, absl::Span<const ForwardChunk> chunks, absl::Span<const uint32_t> start);
  absl::Status Attention(uint32_t l, absl::Span<const ForwardChunk> chunks,
                         absl::Span<const uint32_t> start);
  absl::Status Logits(absl::Span<const ForwardChunk> chunks, bool all, std::vector<float>* logits);
  // GEMM input in the weights' type: `x` itself for fp32, else converted.
  absl::StatusOr<const void*> GemmInput(const float* x, int64_t n);
  // y[rows][out] = in[rows][k] * w[out][k]^T + beta * y (fp32 y).
  absl::Status Gemm(const void* in, int rows, int k, const void* w, int out, float* y, float beta);

  const ModelConfig c_;
  PagedKvCache& cache_;
  const CudaForwardOptions options_;
  std::string describe_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<DeviceWeights> w_;
  // Per-pass scratch, grown as needed: fp32 rows.
  int rows_ = 0;
  bool decode_ = false;  // every chunk is one token: batched decode kernels
  DeviceBuffer x_, h_, q_, k_, v_, attn_, gate_, up_, conv_, logits_, ints_, ws_;
  // Index arrays of the pass, uploaded in one copy (host_ints_ -> ints_):
  // tokens, positions, rows whose logits are wanted, block tables, lengths.
  std::vector<int32_t> host_ints_;
  size_t tokens_at_ = 0, positions_at_ = 0, out_rows_at_ = 0, tables_at_ = 0, lens_at_ = 0;
  std::vector<size_t> table_at_;       // each chunk's table (prefill)
  std::vector<uint32_t> table_len_;    // its entries
  uint32_t stride_ = 0, max_len_ = 0;  // decode tables
  const int32_t* Ints(size_t at) const { return ints_.get<int32_t>() + at; }
};

}  // namespace kvtier::decoder::cuda
