// The shared cache's link to its cluster (one per Redis ACL user): one
// client per channel, created lazily (a RedisCluster runs one batch at a
// time, so lookups never queue behind publishing, and each pipelined reader
// has its own), and the up/down state: once a call finds no node at all,
// the link is down and only one call per backoff period tries again. A
// single hung or dead node is the client's per-node backoff (redis_cluster.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tiers/remote/redis_cluster.h"

namespace kvtier::tiers::shared_cache {

using remote::RedisCluster;
using remote::RedisClusterConfig;

struct LinkConfig {
  RedisClusterConfig cluster;
  // While the cluster is unreachable, calls skip it and one retries after
  // a backoff doubling from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

class ClusterLink {
 public:
  // Channels: lookups and forgets, publishing, then one per reader.
  static constexpr size_t kLookup = 0, kPublish = 1, kFirstReader = 2;
  ClusterLink(const LinkConfig& config, size_t channels);

  // The client of `channel` (< channels); nullptr while the cluster is down
  // and no retry is due (the caller treats it as a miss). Never blocks on
  // the network but to create a client, or to wait for another call
  // creating it (bounded by the connect timeout per seed).
  RedisCluster* Acquire(size_t channel) ABSL_LOCKS_EXCLUDED(mu_);
  // What a call on `client` found: the cluster `reachable` (some node
  // answered) or not. Thread-safe.
  void Report(bool reachable) ABSL_LOCKS_EXCLUDED(mu_);

  bool down() const { return down_flag_.load(std::memory_order_relaxed); }
  // Sums of its clients' stats: nodes in backoff now (a gauge), times a
  // node went down, batches run on a NoNetworkIoScope thread.
  struct Health {
    uint64_t down_nodes = 0, node_down_events = 0, forbidden_io = 0;
  };
  Health health() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t down_events() const { return down_events_.load(std::memory_order_relaxed); }

 private:
  void MarkDownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LinkConfig config_;
  mutable absl::Mutex mu_;
  // Created once, kept until the tier goes: callers use them unlocked.
  std::vector<std::unique_ptr<RedisCluster>> clients_ ABSL_GUARDED_BY(mu_);
  // Not vector<bool>: Await needs the address of one flag.
  std::unique_ptr<bool[]> creating_ ABSL_GUARDED_BY(mu_);
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_);
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> down_flag_{false};
  std::atomic<uint64_t> down_events_{0};
};

// Whether a batch's results say the cluster is unreachable: every key
// failed Unavailable and the client could not reload the slot map from any
// node meanwhile (`refresh_failures` grew). One master down is not that.
bool ClusterUnreachable(size_t failed_unavailable, size_t keys, uint64_t refresh_failures_before,
                        uint64_t refresh_failures_after);

}  // namespace kvtier::tiers::shared_cache
