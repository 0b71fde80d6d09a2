// The remote tier's link to its cluster: one client per channel, created
// lazily (a RedisCluster runs one batch at a time, so reads never queue
// behind the evictor's writes, and each pipelined reader has its own), and
// the up/down state: once a call finds no node at all, the tier is down and
// only one call per backoff period tries again.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tiers/remote/redis_cluster.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier::tiers::remote {

class ClusterLink {
 public:
  // Channels: synchronous reads and existence checks, the evictor's
  // writes, write-through publishing, then one per pipelined reader.
  static constexpr size_t kRead = 0, kWrite = 1, kPublish = 2, kFirstReader = 3;
  ClusterLink(const RemoteTierConfig& config, size_t channels);

  // The client of `channel` (< channels); nullptr while the cluster is down
  // and no retry is due (the caller treats it as a miss). Never blocks on
  // the network but to create a client, or to wait for another call
  // creating it (bounded by the connect timeout per seed).
  RedisCluster* Acquire(size_t channel) ABSL_LOCKS_EXCLUDED(mu_);
  // What a call on `client` found: the cluster `reachable` (some node
  // answered) or not. Thread-safe.
  void Report(bool reachable) ABSL_LOCKS_EXCLUDED(mu_);

  bool down() const { return down_flag_.load(std::memory_order_relaxed); }
  uint64_t down_events() const { return down_events_.load(std::memory_order_relaxed); }

 private:
  void MarkDownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RemoteTierConfig config_;
  absl::Mutex mu_;
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

}  // namespace kvtier::tiers::remote
