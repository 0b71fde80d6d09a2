// Builds a DecoderSession: the model's config -> KV cache (host shm or GPU)
// -> the daemon link (HELLO + REGISTER) started on a helper thread -> weights
// and their fingerprint -> model (CPU, or the CUDA backend) -> the link
// joined and rooted at the fingerprint. The link needs only the layout, so a
// fresh process's connection setup hides behind its weight load.
#include "kvtier/decoder/session.h"

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

long ThreadMinorFaults() {
  rusage r{};
  getrusage(RUSAGE_THREAD, &r);
  return r.ru_minflt;
}

// An attention window given on the command line changes every page's KV
// past the window (the layers above the first attend over fewer tokens),
// so it goes into the config the fingerprint hashes: pages stored under
// one window are never restored under another. Without an override the
// config (and every existing key) is unchanged.
void ApplyOverrides(const SessionOptions& o, ModelConfig& c) {
  if (o.sliding_window.has_value()) c.sliding_window = *o.sliding_window;
}

// The config the session runs, known before any weight is read: all that
// the KV arena and the daemon link need.
absl::StatusOr<ModelConfig> ResolveConfig(const SessionOptions& o) {
  ModelConfig c;
  if (!o.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(c, LoadConfigFile(o.checkpoint_dir + "/config.json"));
  } else if (auto device_only = DeviceRandomConfig(o.size); device_only.ok()) {
    if (o.device != DeviceKind::kCuda)
      return absl::InvalidArgumentError(absl::StrCat(
          "size \"", o.size, "\" exists only as random weights on the GPU (--device=cuda)"));
    c = *device_only;
  } else {
    ASSIGN_OR_RETURN(c, NamedConfig(o.size));
  }
  ApplyOverrides(o, c);
  return c;
}

// A checkpoint's config.json is read twice: first to size the arena and
// start the link, then with the weights. A file rewritten in between would
// leave the arena (or the page keys) of one config under a model of
// another. Compared as the fingerprint hashes it.
absl::Status CheckSameConfig(const std::string& dir, const ModelConfig& early,
                             const ModelConfig& loaded) {
  if (early.ToJson() == loaded.ToJson()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      dir,
      "/config.json changed while the session started (read once to size the KV arena, "
      "then again with the weights); start again"));
}

// The daemon link as the helper thread hands it over.
struct Link {
  absl::StatusOr<std::unique_ptr<PrefixStore>> store;
  double ms = 0;  // HELLO + REGISTER on the helper thread
};

// Starts HELLO + REGISTER of `cache`'s arena on a helper thread. No future
// when no daemon is to be contacted; *note then says why. A std::async
// future joins its thread when destroyed, so `cache` must outlive it.
std::future<Link> StartLink(const SessionOptions& o, PagedKvCache* cache, std::string* note) {
  if (!o.use_daemon) {
    *note = "daemon disabled (--no_daemon)";
    return {};
  }
  // ZeroMQ connects lazily, so a missing ipc socket would only show up as a
  // HELLO timeout; check the path first to start at once without a daemon.
  const std::string endpoint = o.client.endpoint.empty() ? DefaultEndpoint() : o.client.endpoint;
  if (absl::StartsWith(endpoint, "ipc://") && !std::filesystem::exists(endpoint.substr(6))) {
    *note = absl::StrCat("no daemon (no socket at ", endpoint, "): running without reuse");
    return {};
  }
  // The Client's ZeroMQ socket is made on the helper thread and used on the
  // caller's after the future hands it over: a full barrier, which is all
  // ZeroMQ asks of a socket that changes threads.
  return std::async(std::launch::async, [options = o.client, cache] {
    const Clock::time_point start = Clock::now();
    Link link{PrefixStore::Connect(options, cache)};
    link.ms = MsSince(start);
    return link;
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderSession>> DecoderSession::Create(const SessionOptions& o) {
  std::unique_ptr<DecoderSession> s(new DecoderSession());
  const bool cuda = o.device == DeviceKind::kCuda;
  if (cuda && !CudaDecoderBuilt())
    return absl::FailedPreconditionError(
        "--device=cuda: this build has no CUDA decoder (configure with -DKVTIER_CUDA=ON)");
  ASSIGN_OR_RETURN(const ModelConfig config, ResolveConfig(o));
  RETURN_IF_ERROR(s->CreateCache(o, config));
  // Declared after `s`: on every return below the future's destructor joins
  // the helper thread before the session frees the arena it registers.
  std::future<Link> link = StartLink(o, s->cache_.get(), &s->daemon_note_);
  CudaForwardOptions cuda_options = o.cuda;
  RETURN_IF_ERROR(s->LoadWeights(o, config, &cuda_options));
  std::unique_ptr<DeviceForward> device;
  if (cuda) {
    ASSIGN_OR_RETURN(device, CreateCudaForward(*s->weights_, *s->cache_, cuda_options));
  }
  ASSIGN_OR_RETURN(s->model_, Model::Create(s->weights_.get(), s->cache_.get(), std::move(device)));
  if (link.valid()) {
    const Clock::time_point start = Clock::now();
    Link l = link.get();
    s->timings_.connect_wait_ms = MsSince(start);
    s->timings_.connect_ms = l.ms;
    RETURN_IF_ERROR(s->AdoptLink(std::move(l.store)));
  }
  return s;
}

absl::Status DecoderSession::CreateCache(const SessionOptions& o, const ModelConfig& config) {
  // config.sliding_window is the override's when one was given.
  KvCacheOptions kv{KvLayoutFor(config, o.tokens_per_page, o.kv_dtype), o.kv_pages,
                    config.sliding_window};
  kv.on_gpu = o.device == DeviceKind::kCuda;
  kv.gpu = o.cuda.device;
  kv.huge_pages = o.kv_huge_pages;
  const long faults = ThreadMinorFaults();
  const Clock::time_point start = Clock::now();
  ASSIGN_OR_RETURN(cache_, PagedKvCache::Create(kv));
  timings_.arena_ms = MsSince(start);
  timings_.arena_minor_faults = ThreadMinorFaults() - faults;
  return absl::OkStatus();
}

absl::Status DecoderSession::LoadWeights(const SessionOptions& o, const ModelConfig& config,
                                         CudaForwardOptions* cuda) {
  const Clock::time_point start = Clock::now();
  cuda->seed = o.weight_seed;
  // On the GPU the weights' dtype changes every page's KV (as quantization
  // would): it goes into the fingerprint unless it is the CPU's fp32.
  const TensorDtype gpu_weights =
      o.device == DeviceKind::kCuda ? o.cuda.weights : TensorDtype::kF32;
  if (!o.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(weights_, LoadCheckpoint(o.checkpoint_dir));
    ApplyOverrides(o, weights_->config);
    RETURN_IF_ERROR(CheckSameConfig(o.checkpoint_dir, config, weights_->config));
    fingerprint_ = WithGpuWeights(ModelFingerprint(*weights_), gpu_weights);
  } else if (DeviceRandomConfig(o.size).ok()) {
    weights_ = std::make_unique<ModelWeights>();  // the config only; tensors live on the device
    weights_->config = config;
    cuda->random_on_device = true;
    fingerprint_ = WithGpuWeights(DeviceRandomFingerprint(config, o.weight_seed), gpu_weights);
  } else {
    // The window shapes no tensor: the draws are those of the named size.
    weights_ = RandomWeights(config, o.weight_seed);
    fingerprint_ = WithGpuWeights(ModelFingerprint(*weights_), gpu_weights);
  }
  timings_.weights_ms = MsSince(start);
  return absl::OkStatus();
}

absl::Status DecoderSession::AdoptLink(absl::StatusOr<std::unique_ptr<PrefixStore>> store) {
  if (!store.ok()) {
    daemon_note_ =
        absl::StrCat("no daemon (", store.status().message(), "): running without reuse");
    return absl::OkStatus();
  }
  store_ = *std::move(store);
  // The keys' root is the weights' hash, known only now.
  return store_->SetRoot(fingerprint_);
}

}  // namespace kvtier::decoder
