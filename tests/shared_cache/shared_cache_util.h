// Helpers of the shared-cache tests: a RedisSharedCache with tenants' keys
// derived from a test secret, and the asynchronous calls made synchronous.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tiers/shared_cache/cache_keys.h"
#include "tiers/shared_cache/redis_shared_cache.h"

namespace kvtier::tiers::shared_cache {

inline ClusterSecrets TestSecret(uint8_t fill) {
  ClusterSecrets s;
  s.secrets.emplace_back();
  s.secrets.back().fill(fill);
  return s;
}
inline const ClusterSecrets kSecretA = TestSecret(0xa1);
inline const ClusterSecrets kSecretB = TestSecret(0xb2);

// (namespace, token) pairs; the cache on `cluster` with their keys.
inline std::unique_ptr<SharedCache> MakeCache(
    const remote::RedisClusterConfig& cluster,
    const std::vector<std::pair<std::string, std::string>>& tenants, const ClusterSecrets& secret,
    RedisSharedCacheConfig config = {}) {
  config.cluster = cluster;
  for (const auto& [ns, token] : tenants) config.tenant_keys[ns] = *DeriveTenantKeys(secret, ns, token);
  return *CreateRedisSharedCache(config);
}

inline std::vector<bool> ContainsNow(SharedCache& c, const std::string& ns,
                                     std::vector<PageKey> keys) {
  std::promise<std::vector<bool>> p;
  c.Contains(ns, std::move(keys), [&](std::vector<bool> v) { p.set_value(std::move(v)); });
  return p.get_future().get();
}

inline std::vector<FetchedPage> FetchNow(SharedCache& c, const std::string& ns,
                                         std::vector<PageKey> keys, uint64_t page_bytes) {
  std::promise<std::vector<FetchedPage>> p;
  c.Fetch(ns, std::move(keys), page_bytes,
          [&](std::vector<FetchedPage> v) { p.set_value(std::move(v)); });
  return p.get_future().get();
}

inline std::pair<absl::Status, uint64_t> ForgetNow(SharedCache& c, const std::string& ns,
                                                   std::vector<PageKey> keys) {
  std::promise<std::pair<absl::Status, uint64_t>> p;
  c.Forget(ns, std::move(keys), [&](absl::Status st, uint64_t n) { p.set_value({st, n}); });
  return p.get_future().get();
}

}  // namespace kvtier::tiers::shared_cache
