// Where the decoder's forward pass runs. The CPU path is Model's own code;
// another device plugs in through DeviceForward, which Model::Forward calls
// after its cache bookkeeping (reservation, rollback on error, commit), so
// the two paths share every rule about sequences and pages. The CUDA backend
// (client/decoder/cuda/) exists only in builds with KVTIER_HAVE_CUDA; in
// other builds CreateCudaForward says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kvtier/decoder/model.h"
#include "kvtier/decoder/safetensors.h"
#include "kvtier/page_key.h"

namespace kvtier::decoder {

enum class DeviceKind { kCpu, kCuda };
// "cpu" or "cuda".
absl::StatusOr<DeviceKind> ParseDevice(absl::string_view name);
absl::string_view DeviceName(DeviceKind kind);
// --gpu_weights: "fp32", "fp16" or "bf16".
absl::StatusOr<TensorDtype> ParseGpuWeights(absl::string_view name);

// DeviceForward, the interface, is declared in model.h.

struct CudaForwardOptions {
  int device = 0;
  // Weights on the device: kF32 (the CPU path's arithmetic: fp32 GEMMs,
  // TF32 off), kBF16 or kF16 (converted on upload; activations are rounded
  // to that dtype before each GEMM, accumulation in fp32).
  TensorDtype weights = TensorDtype::kBF16;
  // Random weights generated on the device from this seed instead of
  // uploading ModelWeights (which then carry only the config): models too
  // large to build on the host. Not the same numbers as RandomWeights.
  bool random_on_device = false;
  uint64_t seed = 1;
  float init_std = 0.02f;
  // Longest pass: a longer prefill chunk runs as several passes (chunked
  // prefill) so activations stay bounded (8B shapes: ~1 GiB per 4k rows).
  uint32_t max_rows_per_pass = 4096;
};

// The fingerprint of pages computed on the GPU with `weights` (--gpu_weights):
// `fingerprint` itself for fp32 weights (the CPU path's arithmetic: pages
// shared with CPU and Python sessions, which differ from it by rounding
// only), another key for bf16 or fp16 weights, whose KV differs as much as a
// quantized model's would: such pages are never restored into an fp32
// session, nor its pages into theirs.
PageKey WithGpuWeights(const PageKey& fingerprint, TensorDtype weights);

// True when this build has the CUDA decoder backend.
bool CudaDecoderBuilt();

// The CUDA backend over `cache`, whose arena must be on the GPU
// (KvCacheOptions::on_gpu). FailedPrecondition without a usable device or
// in a build without CUDA, naming why. `weights` and `cache` are borrowed.
absl::StatusOr<std::unique_ptr<DeviceForward>> CreateCudaForward(const ModelWeights& weights,
                                                                 PagedKvCache& cache,
                                                                 const CudaForwardOptions& options);

// Named sizes that exist only as random weights on the device:
// "llama3-8b" (32 layers, 32 q / 8 KV heads of 128, hidden 4096, SwiGLU
// 14336, vocab 128256, rope_theta 500000, untied). NotFound for other names.
absl::StatusOr<ModelConfig> DeviceRandomConfig(absl::string_view name);

// The page-key root of device-random weights: their config and seed (the
// weights never exist on the host to hash).
PageKey DeviceRandomFingerprint(const ModelConfig& config, uint64_t seed);

}  // namespace kvtier::decoder
