// Device names, the device-only model sizes and their page-key root. Shared
// by every build; the CUDA backend itself is in cuda/ (or device_stub.cc).
#include "kvtier/decoder/device.h"

#include <xxhash.h>

#include "absl/strings/str_cat.h"

namespace kvtier::decoder {

absl::StatusOr<DeviceKind> ParseDevice(absl::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", name, "\" (cpu, cuda)"));
}

absl::string_view DeviceName(DeviceKind kind) { return kind == DeviceKind::kCuda ? "cuda" : "cpu"; }

absl::StatusOr<TensorDtype> ParseGpuWeights(absl::string_view name) {
  if (name == "fp32") return TensorDtype::kF32;
  if (name == "fp16") return TensorDtype::kF16;
  if (name == "bf16") return TensorDtype::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("unknown GPU weight dtype \"", name, "\" (fp32, fp16, bf16)"));
}

absl::StatusOr<ModelConfig> DeviceRandomConfig(absl::string_view name) {
  if (name != "llama3-8b")
    return absl::NotFoundError(absl::StrCat("\"", name, "\" is not a device-only size (llama3-8b)"));
  ModelConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.tie_word_embeddings = false;
  c.bos_token_id = 128000;
  c.eos_token_id = -1;  // random weights: never stop early in a benchmark
  return c;
}

PageKey WithGpuWeights(const PageKey& fingerprint, TensorDtype weights) {
  if (weights == TensorDtype::kF32) return fingerprint;
  std::string text(reinterpret_cast<const char*>(fingerprint.bytes.data()), fingerprint.bytes.size());
  absl::StrAppend(&text, "\ngpu weights ", TensorDtypeName(weights));
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  return PageKey::FromBytes(canon.digest);
}

PageKey DeviceRandomFingerprint(const ModelConfig& config, uint64_t seed) {
  const std::string text = absl::StrCat(config.ToJson(), "\ndevice-random seed ", seed);
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  return PageKey::FromBytes(canon.digest);
}

}  // namespace kvtier::decoder
