// DecoderSession: everything a generating process holds, built from one set
// of options: weights (a checkpoint directory or random weights of a named
// size), the paged KV cache sized for the job, the model, and — when a daemon
// answers — the PrefixStore. Shared by kvtier-generate, the benchmark and the
// tests so they all run the same wiring. The daemon link (HELLO + REGISTER of
// the arena) is made while the weights load: it needs only the KV layout.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kvtier/client.h"
#include "kvtier/decoder/device.h"
#include "kvtier/decoder/generator.h"
#include "kvtier/decoder/kv_cache.h"
#include "kvtier/decoder/model.h"
#include "kvtier/decoder/prefix_store.h"
#include "kvtier/decoder/weights.h"

namespace kvtier::decoder {

struct SessionOptions {
  std::string checkpoint_dir;   // non-empty: load it
  std::string size = "tiny";    // else random weights of this named size
                                // (device-only sizes, e.g. "llama3-8b", need kCuda)
  uint64_t weight_seed = 1;
  uint32_t tokens_per_page = 256;
  Dtype kv_dtype = Dtype::kFp16;
  uint32_t kv_pages = 64;       // arena size in pages
  // The host arena's pages (KvCacheOptions::huge_pages): 2 MiB hugetlb pages
  // when the machine has them free, unless kOff.
  HugePages kv_huge_pages = HugePages::kAuto;
  // The attention window; unset: the checkpoint's config (sliding_window).
  std::optional<uint32_t> sliding_window;
  bool use_daemon = true;
  // kCuda: weights, activations and the KV arena on the GPU (device.h); the
  // arena is registered with kvtierd by CUDA IPC.
  DeviceKind device = DeviceKind::kCpu;
  CudaForwardOptions cuda;      // its seed and random_on_device are set here
  ClientOptions client;         // endpoint/tenant/token; the layout is filled in
};

// Where DecoderSession::Create's time went, in ms (for benchmarks and logs).
struct SessionTimings {
  double arena_ms = 0;          // the KV arena created and cleared
  long arena_minor_faults = 0;  // minor page faults of Create's thread meanwhile
  double weights_ms = 0;        // weights loaded or drawn, and fingerprinted
  // HELLO + REGISTER of the arena, on a helper thread while the weights
  // load; 0 when no daemon was contacted.
  double connect_ms = 0;
  // How long Create then waited for that link with everything else ready
  // (weights, fingerprint, model): 0 when the weight load hid it.
  double connect_wait_ms = 0;
};

class DecoderSession {
 public:
  // Fails on bad weights or cache options, and with Aborted when a
  // checkpoint's config.json changed between the read that sized the KV
  // arena and the weight load. A daemon that does not answer is not an
  // error: store() is then null and daemon_note() says why. Returns only
  // once the daemon link is made or failed (no thread outlives Create).
  static absl::StatusOr<std::unique_ptr<DecoderSession>> Create(const SessionOptions& options);

  // The root of the page keys (ModelFingerprint, or DeviceRandomFingerprint).
  const PageKey& fingerprint() const { return fingerprint_; }

  ModelWeights& weights() { return *weights_; }
  PagedKvCache& cache() { return *cache_; }
  Model& model() { return *model_; }
  PrefixStore* store() { return store_.get(); }
  const std::string& daemon_note() const { return daemon_note_; }
  const SessionTimings& timings() const { return timings_; }
  Generator generator() { return Generator(model_.get(), store_.get()); }

 private:
  DecoderSession() = default;
  // The arena for `config` (the one the weights must then have).
  absl::Status CreateCache(const SessionOptions& o, const ModelConfig& config);
  absl::Status LoadWeights(const SessionOptions& o, const ModelConfig& config,
                           CudaForwardOptions* cuda);
  // Takes the helper thread's link (or notes why there is none) and roots
  // its keys at the fingerprint.
  absl::Status AdoptLink(absl::StatusOr<std::unique_ptr<PrefixStore>> store);
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<PagedKvCache> cache_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PrefixStore> store_;
  std::string daemon_note_;
  PageKey fingerprint_;
  SessionTimings timings_;
};

}  // namespace kvtier::decoder
