// The remote tier's link to its cluster: two clients, created lazily (a
// RedisCluster runs one batch at a time, so reads never queue behind the
// evictor's writes), and the up/down state: once a call finds no node at
// all, the tier is down and only one call per backoff period tries again.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tiers/remote/redis_cluster.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier::tiers::remote {

class ClusterLink {
 public:
  enum class Role { kRead = 0, kWrite = 1 };
  explicit ClusterLink(const RemoteTierConfig& config);

  // The client for `role`; nullptr while the cluster is down and no retry
  // is due (the caller treats it as a miss). Never blocks on the network
  // but to create a client, or to wait for another call creating it
  // (bounded by the connect timeout per seed).
  RedisCluster* Acquire(Role role) ABSL_LOCKS_EXCLUDED(mu_);
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
  std::unique_ptr<RedisCluster> clients_[2] ABSL_GUARDED_BY(mu_);
  bool creating_[2] ABSL_GUARDED_BY(mu_) = {false, false};
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
