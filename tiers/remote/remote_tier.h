// RemoteTier: the shared tier below NVMe, on a Redis Cluster. Slots are
// local handles; a page's bytes are staged by Write and stored by
// PersistBatch (one pipelined MultiSet for the batch) as one
// self-describing record per page (remote_record.h). Reads verify the
// record before a byte is served. Faults are misses, never errors: the
// store's GET treats DataLoss as a miss, so every failed read says DataLoss.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tiers/remote/redis_cluster.h"
#include "tiers/tier.h"

namespace kvtier::tiers::remote {

// A Redis ACL user (a tenant's own, from the tenants file).
struct RemoteCredentials {
  std::string user, password;
};

struct RemoteTierConfig {
  // The cluster, and the user every namespace without its own uses.
  RedisClusterConfig cluster;
  // Namespaces whose records are read and written as their own Redis ACL
  // user (on connections of their own), so the cluster itself refuses one
  // tenant's connections another tenant's keys (docs/OPERATIONS.md).
  absl::flat_hash_map<std::string, RemoteCredentials> ns_credentials;
  // Bytes of pages this node keeps in the cluster (its own accounting: the
  // store evicts, and deletes, its oldest remote pages above it). The
  // cluster's maxmemory policy may drop values earlier: a read then misses.
  uint64_t capacity_bytes = 64ull << 30;
  uint64_t max_page_bytes = 16ull << 20;
  // While the cluster is unreachable, requests skip it and one retries
  // after a backoff doubling from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // Pipelined reads: this many reader threads, each with its own
  // connections, take the reads queued (ReadAsync) and fetch up to
  // max_read_batch_bytes of them as one pipeline per node.
  uint32_t readers = 2;
  uint64_t max_read_batch_bytes = 32ull << 20;
  // Write-through copies waiting to be stored; PUTs beyond it keep their
  // pages local only (counted in publish_drops).
  uint64_t max_publish_queue_bytes = 256ull << 20;

  absl::Status Validate() const;
};

// Never fails for an unreachable cluster (the tier starts down and retries);
// InvalidArgument for a bad config.
absl::StatusOr<std::unique_ptr<Tier>> CreateRemoteTier(const RemoteTierConfig& config);

}  // namespace kvtier::tiers::remote
