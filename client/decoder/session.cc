// Builds a DecoderSession: weights -> KV cache (host shm or GPU) -> model
// (CPU, or the CUDA backend) -> daemon link.
#include "kvtier/decoder/session.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {

absl::Status DecoderSession::LoadWeights(const SessionOptions& o, CudaForwardOptions* cuda) {
  cuda->seed = o.weight_seed;
  // On the GPU the weights' dtype changes every page's KV (as quantization
  // would): it goes into the fingerprint unless it is the CPU's fp32.
  const TensorDtype gpu_weights =
      o.device == DeviceKind::kCuda ? o.cuda.weights : TensorDtype::kF32;
  // An attention window given on the command line changes every page's KV
  // past the window (the layers above the first attend over fewer tokens),
  // so it goes into the config the fingerprint hashes: pages stored under
  // one window are never restored under another. Without an override the
  // config (and every existing key) is unchanged.
  auto apply_overrides = [&o](ModelConfig& c) {
    if (o.sliding_window.has_value()) c.sliding_window = *o.sliding_window;
  };
  if (!o.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(weights_, LoadCheckpoint(o.checkpoint_dir));
    apply_overrides(weights_->config);
    fingerprint_ = WithGpuWeights(ModelFingerprint(*weights_), gpu_weights);
    return absl::OkStatus();
  }
  if (auto device_only = DeviceRandomConfig(o.size); device_only.ok()) {
    if (o.device != DeviceKind::kCuda)
      return absl::InvalidArgumentError(
          absl::StrCat("size \"", o.size, "\" exists only as random weights on the GPU (--device=cuda)"));
    weights_ = std::make_unique<ModelWeights>();  // the config only; tensors live on the device
    weights_->config = *device_only;
    apply_overrides(weights_->config);
    cuda->random_on_device = true;
    fingerprint_ = WithGpuWeights(DeviceRandomFingerprint(weights_->config, o.weight_seed),
                                  gpu_weights);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ModelConfig config, NamedConfig(o.size));
  weights_ = RandomWeights(config, o.weight_seed);
  apply_overrides(weights_->config);
  fingerprint_ = WithGpuWeights(ModelFingerprint(*weights_), gpu_weights);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DecoderSession>> DecoderSession::Create(const SessionOptions& o) {
  std::unique_ptr<DecoderSession> s(new DecoderSession());
  const bool cuda = o.device == DeviceKind::kCuda;
  if (cuda && !CudaDecoderBuilt())
    return absl::FailedPreconditionError(
        "--device=cuda: this build has no CUDA decoder (configure with -DKVTIER_CUDA=ON)");
  CudaForwardOptions cuda_options = o.cuda;
  RETURN_IF_ERROR(s->LoadWeights(o, &cuda_options));
  KvCacheOptions kv{KvLayoutFor(s->weights_->config, o.tokens_per_page, o.kv_dtype), o.kv_pages,
                    o.sliding_window.value_or(s->weights_->config.sliding_window)};
  kv.on_gpu = cuda;
  kv.gpu = cuda_options.device;
  kv.huge_pages = o.kv_huge_pages;
  ASSIGN_OR_RETURN(s->cache_, PagedKvCache::Create(kv));
  std::unique_ptr<DeviceForward> device;
  if (cuda) {
    ASSIGN_OR_RETURN(device, CreateCudaForward(*s->weights_, *s->cache_, cuda_options));
  }
  ASSIGN_OR_RETURN(s->model_, Model::Create(s->weights_.get(), s->cache_.get(), std::move(device)));
  RETURN_IF_ERROR(s->Connect(o));
  return s;
}

absl::Status DecoderSession::Connect(const SessionOptions& o) {
  if (!o.use_daemon) {
    daemon_note_ = "daemon disabled (--no_daemon)";
    return absl::OkStatus();
  }
  // ZeroMQ connects lazily, so a missing ipc socket would only show up as a
  // HELLO timeout; check the path first to start at once without a daemon.
  const std::string endpoint = o.client.endpoint.empty() ? DefaultEndpoint() : o.client.endpoint;
  if (absl::StartsWith(endpoint, "ipc://") && !std::filesystem::exists(endpoint.substr(6))) {
    daemon_note_ = absl::StrCat("no daemon (no socket at ", endpoint, "): running without reuse");
    return absl::OkStatus();
  }
  auto store = PrefixStore::Connect(o.client, cache_.get(), fingerprint_);
  if (store.ok()) {
    store_ = *std::move(store);
  } else {
    daemon_note_ = absl::StrCat("no daemon (", store.status().message(), "): running without reuse");
  }
  return absl::OkStatus();
}

}  // namespace kvtier::decoder
