// ClusterLink (cluster_link.h): lazy clients and the down state's backoff.
#include "tiers/shared_cache/cluster_link.h"

#include <algorithm>
#include <utility>

#include "spdlog/spdlog.h"

namespace kvtier::tiers::shared_cache {
namespace {

// Every client of a link (one per thread) sees the same node health: a node
// one thread found hung is skipped by the others for its backoff too.
LinkConfig WithSharedHealth(LinkConfig c) {
  c.cluster.shared_health = std::make_shared<remote::NodeHealthTable>();
  return c;
}

}  // namespace

ClusterLink::ClusterLink(const LinkConfig& config, size_t channels)
    : config_(WithSharedHealth(config)),
      clients_(channels),
      creating_(new bool[channels]()),
      backoff_(config.min_backoff) {}

RedisCluster* ClusterLink::Acquire(size_t channel) {
  const size_t r = channel;
  absl::MutexLock lock(&mu_);
  if (r >= clients_.size()) return nullptr;
  const absl::Time now = absl::Now();
  if (down_) {
    if (now < retry_at_) return nullptr;
    retry_at_ = now + backoff_;  // this call probes; the others keep skipping
  }
  if (clients_[r] != nullptr) return clients_[r].get();
  if (creating_[r]) {
    // Another call is connecting: wait for its outcome rather than count
    // this call's pages as misses (bounded by the connect timeouts).
    mu_.Await(absl::Condition(
        +[](bool* creating) { return !*creating; }, &creating_[r]));
    return clients_[r].get();  // nullptr when that attempt failed
  }
  creating_[r] = true;
  mu_.Unlock();
  absl::StatusOr<std::unique_ptr<RedisCluster>> made = RedisCluster::Create(config_.cluster);
  mu_.Lock();
  creating_[r] = false;
  if (!made.ok()) {
    // Once per outage, naming the user: a refused tenant user (wrong
    // password, missing ACL) is as visible as a cluster that is gone.
    if (!down_)
      spdlog::warn("shared cache: cannot use the cluster as Redis user '{}': {}; its pages are "
                   "misses, retrying with backoff",
                   config_.cluster.user.empty() ? "default" : config_.cluster.user,
                   made.status().ToString());
    MarkDownLocked();
    return nullptr;
  }
  clients_[r] = *std::move(made);
  return clients_[r].get();
}

void ClusterLink::Report(bool reachable) {
  absl::MutexLock lock(&mu_);
  if (reachable && down_)
    spdlog::info("shared cache: the cluster answers again (Redis user '{}')",
                 config_.cluster.user.empty() ? "default" : config_.cluster.user);
  if (!reachable && !down_)
    spdlog::warn("shared cache: no node of the cluster answered (Redis user '{}'); its pages are "
                 "misses, retrying with backoff",
                 config_.cluster.user.empty() ? "default" : config_.cluster.user);
  if (reachable) {
    down_ = false;
    down_flag_.store(false, std::memory_order_relaxed);
    backoff_ = config_.min_backoff;
    return;
  }
  MarkDownLocked();
}

void ClusterLink::MarkDownLocked() {
  if (!down_) {
    down_events_.fetch_add(1, std::memory_order_relaxed);
    backoff_ = config_.min_backoff;
  } else {
    backoff_ = std::min(backoff_ * 2, config_.max_backoff);
  }
  down_ = true;
  down_flag_.store(true, std::memory_order_relaxed);
  retry_at_ = absl::Now() + backoff_;
}

ClusterLink::Health ClusterLink::health() const {
  Health h;
  absl::MutexLock lock(&mu_);
  for (const auto& c : clients_) {
    if (c == nullptr) continue;
    const remote::RedisClusterStats s = c->stats();
    h.node_down_events += s.node_down_events;
    h.forbidden_io += s.forbidden_io;
    h.down_nodes = std::max<uint64_t>(h.down_nodes, c->DownNodes().size());
  }
  return h;
}

bool ClusterUnreachable(size_t failed_unavailable, size_t keys, uint64_t refresh_failures_before,
                        uint64_t refresh_failures_after) {
  return keys > 0 && failed_unavailable == keys && refresh_failures_after > refresh_failures_before;
}

}  // namespace kvtier::tiers::shared_cache
