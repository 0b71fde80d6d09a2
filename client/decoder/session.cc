// Builds a DecoderSession: weights -> KV cache -> model -> daemon link.
#include "kvtier/decoder/session.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {

absl::StatusOr<std::unique_ptr<DecoderSession>> DecoderSession::Create(const SessionOptions& o) {
  std::unique_ptr<DecoderSession> s(new DecoderSession());
  if (!o.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(s->weights_, LoadCheckpoint(o.checkpoint_dir));
  } else {
    ASSIGN_OR_RETURN(ModelConfig config, NamedConfig(o.size));
    s->weights_ = RandomWeights(config, o.weight_seed);
  }
  KvCacheOptions kv{KvLayoutFor(s->weights_->config, o.tokens_per_page, o.kv_dtype), o.kv_pages,
                    o.sliding_window.value_or(s->weights_->config.sliding_window)};
  ASSIGN_OR_RETURN(s->cache_, PagedKvCache::Create(kv));
  ASSIGN_OR_RETURN(s->model_, Model::Create(s->weights_.get(), s->cache_.get()));
  if (!o.use_daemon) {
    s->daemon_note_ = "daemon disabled (--no_daemon)";
    return s;
  }
  // ZeroMQ connects lazily, so a missing ipc socket would only show up as a
  // HELLO timeout; check the path first to start at once without a daemon.
  const std::string endpoint = o.client.endpoint.empty() ? DefaultEndpoint() : o.client.endpoint;
  if (absl::StartsWith(endpoint, "ipc://") && !std::filesystem::exists(endpoint.substr(6))) {
    s->daemon_note_ = absl::StrCat("no daemon (no socket at ", endpoint, "): running without reuse");
    return s;
  }
  auto store = PrefixStore::Connect(o.client, s->cache_.get(), ModelFingerprint(*s->weights_));
  if (store.ok()) {
    s->store_ = *std::move(store);
  } else {
    s->daemon_note_ = absl::StrCat("no daemon (", store.status().message(), "): running without reuse");
  }
  return s;
}

}  // namespace kvtier::decoder
