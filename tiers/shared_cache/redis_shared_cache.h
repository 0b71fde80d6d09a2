// The shared cache on a Redis Cluster (shared_cache.h): one sealed record
// per page (sealed_record.h) under a per-namespace key (record_key.h), read
// and written as the tenant's own Redis ACL user where it has one. Its own
// threads and connections per purpose: one for lookups and forgets, one for
// publishing, `readers` for fetches, so a burst of publishes never delays a
// LOOKUP and no caller's thread touches the network.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tiers/remote/redis_cluster.h"
#include "tiers/shared_cache/cache_keys.h"
#include "tiers/shared_cache/shared_cache.h"

namespace kvtier::tiers::shared_cache {

// A Redis ACL user (a tenant's own, from the tenants file).
struct RedisCredentials {
  std::string user, password;
};

struct RedisSharedCacheConfig {
  // The cluster, and the user every namespace without its own uses.
  remote::RedisClusterConfig cluster;
  // Namespaces whose records are read and written as their own Redis ACL
  // user (on connections of their own), so the cluster itself refuses one
  // tenant's connections another tenant's keys (docs/OPERATIONS.md).
  absl::flat_hash_map<std::string, RedisCredentials> ns_credentials;
  // Each namespace's sealing keys (cache_keys.h). A namespace without keys
  // shares nothing: its publishes are dropped, its lookups and fetches miss.
  absl::flat_hash_map<std::string, TenantKeys> tenant_keys;
  // Largest page any tenant stores: Publish refuses more, Fetch never reads
  // a record longer than its expected page.
  uint64_t max_page_bytes = 16ull << 20;
  // While the whole cluster is unreachable, calls skip it and one retries
  // after a backoff doubling from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // Fetch threads, each with its own connections; a batch of queued
  // fetches up to max_read_batch_bytes is one pipeline per node.
  uint32_t readers = 2;
  uint64_t max_read_batch_bytes = 32ull << 20;
  // Sealed records waiting to be stored; Publish beyond it is refused.
  uint64_t max_publish_queue_bytes = 256ull << 20;
  // One publish pipeline (per node) holds at most this many record bytes:
  // hiredis copies each record into its output buffer, so a bigger batch
  // is more memory for no more throughput (64 records of 64 KiB already
  // fill the link).
  uint64_t max_publish_batch_bytes = 4ull << 20;
  // Contains/Forget requests waiting; beyond it they answer at once as
  // misses (Contains) or Unavailable (Forget).
  uint32_t max_lookup_queue = 4096;

  absl::Status Validate() const;
};

// Never fails for an unreachable cluster (it starts down and retries);
// InvalidArgument for a bad config.
absl::StatusOr<std::unique_ptr<SharedCache>> CreateRedisSharedCache(
    const RedisSharedCacheConfig& config);

}  // namespace kvtier::tiers::shared_cache
