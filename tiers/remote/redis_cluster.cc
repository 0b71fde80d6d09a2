// RedisCluster: configuration, the batch operations (each a list of key
// commands plus a reply decoder), connections, node health and slot-map
// refresh. The batch engine itself is in cluster_batch.cc.
#include "tiers/remote/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kvtier::tiers::remote {
namespace {

// VisitGetCapped's values from this size up skip hiredis's buffers: pages
// (tens of KiB and up) do; LOOKUP-sized answers never reach here.
constexpr size_t kDirectReadMinBytes = 16 << 10;

absl::Status UnexpectedReply(size_t index, const redisReply* reply) {
  return absl::InternalError(absl::StrCat("key #", index, ": unexpected reply type ", reply->type));
}

}  // namespace

absl::Status RedisClusterConfig::Validate() const {
  if (seeds.empty()) return absl::InvalidArgumentError("redis cluster: no seed node");
  for (const std::string& seed : seeds) {
    auto ep = ParseEndpoint(seed);
    if (!ep.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("redis cluster seed: ", ep.status().message()));
  }
  if (connect_timeout <= absl::ZeroDuration() || command_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis cluster: timeouts must be > 0");
  }
  if (node_min_backoff <= absl::ZeroDuration() || node_max_backoff < node_min_backoff) {
    return absl::InvalidArgumentError(
        "redis cluster: need 0 < node_min_backoff <= node_max_backoff");
  }
  if (max_redirects < 0 || max_redirects > 100) {
    return absl::InvalidArgumentError("redis cluster: max_redirects must be in 0..100");
  }
  if (!user.empty() && password.empty()) {
    return absl::InvalidArgumentError("redis cluster: an ACL user needs a password");
  }
  return absl::OkStatus();
}

RedisCluster::RedisCluster(const RedisClusterConfig& config)
    : config_(config),
      connect_options_{config.connect_timeout, config.command_timeout, config.user,
                       config.password},
      health_(config.shared_health != nullptr ? config.shared_health
                                              : std::make_shared<NodeHealthTable>()) {}

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Create(
    const RedisClusterConfig& config) {
  absl::Status valid = config.Validate();
  if (!valid.ok()) return valid;
  std::unique_ptr<RedisCluster> cluster(new RedisCluster(config));
  absl::Status loaded = cluster->Refresh();
  if (!loaded.ok()) return loaded;
  return cluster;
}

std::vector<absl::StatusOr<std::optional<std::string>>> RedisCluster::MultiGet(
    absl::Span<const std::string> keys) {
  std::vector<absl::StatusOr<std::optional<std::string>>> out(keys.size());
  VisitGet(keys, [&](size_t i, absl::StatusOr<std::optional<absl::string_view>> v) {
    if (!v.ok()) {
      out[i] = v.status();
    } else if (v->has_value()) {
      out[i] = std::string(**v);
    } else {
      out[i] = std::nullopt;
    }
  });
  return out;
}

void RedisCluster::VisitGet(absl::Span<const std::string> keys, ValueFn on_value) {
  std::vector<KeyCommand> cmds(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) cmds[i] = {{"GET", keys[i]}, 2};
  VisitValues(cmds, /*empty_is_absent=*/false, on_value);
}

void RedisCluster::VisitGetCapped(absl::Span<const std::string> keys, uint64_t max_value_bytes,
                                  ValueFn on_value) {
  // The server parses the end as a signed 64-bit integer.
  const uint64_t end = std::min<uint64_t>(max_value_bytes, std::numeric_limits<int64_t>::max());
  const std::string end_arg = absl::StrCat(end);
  std::vector<KeyCommand> cmds(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) cmds[i] = {{"GETRANGE", keys[i], "0", end_arg}, 4};
  // Values the size of pages are read straight off the socket; their bytes
  // are copied once, by whoever the caller hands them to.
  VisitValues(cmds, /*empty_is_absent=*/true, on_value, kDirectReadMinBytes);
}

void RedisCluster::VisitValues(absl::Span<const KeyCommand> cmds, bool empty_is_absent,
                               ValueFn on_value, size_t direct_min) {
  RunBatch(cmds, [&](size_t i, absl::StatusOr<const redisReply*> r) {
    if (!r.ok()) {
      on_value(i, r.status());
    } else if ((*r)->type == REDIS_REPLY_NIL ||
               (empty_is_absent && (*r)->type == REDIS_REPLY_STRING && (*r)->len == 0)) {
      on_value(i, std::nullopt);
    } else if ((*r)->type == REDIS_REPLY_STRING) {
      on_value(i, absl::string_view((*r)->str, (*r)->len));
    } else {
      on_value(i, UnexpectedReply(i, *r));
    }
  }, direct_min);
}

std::vector<absl::Status> RedisCluster::MultiSet(absl::Span<const KeyValue> kvs,
                                                 std::optional<absl::Duration> ttl) {
  if (ttl.has_value() && *ttl < absl::Milliseconds(1)) {
    return std::vector<absl::Status>(kvs.size(),
                                     absl::InvalidArgumentError("redis cluster: ttl < 1 ms"));
  }
  const std::string px = ttl ? absl::StrCat(absl::ToInt64Milliseconds(*ttl)) : "";
  std::vector<KeyCommand> cmds(kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    cmds[i] = ttl ? KeyCommand{{"SET", kvs[i].key, kvs[i].value, "PX", px}, 5}
                  : KeyCommand{{"SET", kvs[i].key, kvs[i].value}, 3};
  }
  std::vector<absl::Status> out(kvs.size());
  RunBatch(cmds, [&](size_t i, absl::StatusOr<const redisReply*> r) {
    if (!r.ok()) {
      out[i] = r.status();
    } else if ((*r)->type != REDIS_REPLY_STATUS) {
      out[i] = UnexpectedReply(i, *r);
    }
  });
  return out;
}

std::vector<absl::StatusOr<bool>> RedisCluster::MultiExists(absl::Span<const std::string> keys) {
  std::vector<KeyCommand> cmds(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) cmds[i] = {{"EXISTS", keys[i]}, 2};
  std::vector<absl::StatusOr<bool>> out(keys.size());
  RunBatch(cmds, [&](size_t i, absl::StatusOr<const redisReply*> r) {
    if (!r.ok()) {
      out[i] = r.status();
    } else if ((*r)->type == REDIS_REPLY_INTEGER) {
      out[i] = (*r)->integer > 0;
    } else {
      out[i] = UnexpectedReply(i, *r);
    }
  });
  return out;
}

std::vector<absl::StatusOr<bool>> RedisCluster::MultiDelete(absl::Span<const std::string> keys) {
  // UNLINK: the server frees large values off its main thread.
  std::vector<KeyCommand> cmds(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) cmds[i] = {{"UNLINK", keys[i]}, 2};
  std::vector<absl::StatusOr<bool>> out(keys.size());
  RunBatch(cmds, [&](size_t i, absl::StatusOr<const redisReply*> r) {
    if (!r.ok()) {
      out[i] = r.status();
    } else if ((*r)->type == REDIS_REPLY_INTEGER) {
      out[i] = (*r)->integer > 0;
    } else {
      out[i] = UnexpectedReply(i, *r);
    }
  });
  return out;
}

absl::Status RedisCluster::Refresh() {
  absl::MutexLock lock(&mu_);
  absl::Status s = RefreshLocked({});
  SweepConnections();
  return s;
}

absl::Status RedisCluster::ConnectMasters() {
  absl::MutexLock lock(&mu_);
  absl::Status first;
  for (const MasterInfo& m : map_.masters()) {
    absl::StatusOr<Connection*> conn = ConnectionTo(m.endpoint);
    if (!conn.ok() && first.ok()) first = conn.status();
  }
  return first;
}

std::vector<std::string> RedisCluster::ConnectedNodes() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [endpoint, conn] : conns_) out.push_back(endpoint);
  std::sort(out.begin(), out.end());
  return out;
}

void RedisCluster::SweepConnections() {
  parked_.clear();
  // Broken connections go, and so do those to nodes that are no longer
  // masters (a failover turned them into replicas, or they left): keys
  // never route there again, and a long-running client must not keep one
  // more idle connection per failover (the hour soak's daemon went from 19
  // to 27 sockets over two failovers of its cluster).
  absl::flat_hash_set<absl::string_view> masters;
  for (const MasterInfo& m : map_.masters()) masters.insert(m.endpoint);
  absl::erase_if(conns_, [&](const auto& kv) {
    return kv.second->broken() || (!masters.empty() && !masters.contains(kv.first));
  });
}

SlotMap RedisCluster::slot_map() const {
  absl::MutexLock lock(&mu_);
  return map_;
}

namespace {
thread_local bool tls_no_network_io = false;
}  // namespace

NoNetworkIoScope::NoNetworkIoScope() : prev_(tls_no_network_io) { tls_no_network_io = true; }
NoNetworkIoScope::~NoNetworkIoScope() { tls_no_network_io = prev_; }
bool NetworkIoForbiddenHere() { return tls_no_network_io; }

RedisClusterStats RedisCluster::stats() const {
  RedisClusterStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.pipelines = pipelines_.load(std::memory_order_relaxed);
  s.moved = moved_.load(std::memory_order_relaxed);
  s.ask = ask_.load(std::memory_order_relaxed);
  s.refreshes = refreshes_.load(std::memory_order_relaxed);
  s.refresh_failures = refresh_failures_.load(std::memory_order_relaxed);
  s.connects = connects_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.node_down_events = node_down_events_.load(std::memory_order_relaxed);
  s.fast_failed = fast_failed_.load(std::memory_order_relaxed);
  s.forbidden_io = forbidden_io_.load(std::memory_order_relaxed);
  return s;
}

std::vector<std::string> RedisCluster::DownNodes() const {
  const absl::Time now = absl::Now();
  std::vector<std::string> out;
  {
    absl::MutexLock lock(&health_->mu);
    for (const auto& [node, health] : health_->nodes) {
      if (health.down_until > now) out.push_back(node);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<NodeHealth> RedisCluster::DownState(absl::string_view node, absl::Time now) const {
  absl::MutexLock lock(&health_->mu);
  auto it = health_->nodes.find(node);
  if (it == health_->nodes.end() || it->second.down_until <= now) return std::nullopt;
  return it->second;
}

bool RedisCluster::AnyDown(absl::Time now) const {
  absl::MutexLock lock(&health_->mu);
  for (const auto& entry : health_->nodes) {
    if (entry.second.down_until > now) return true;
  }
  return false;
}

void RedisCluster::MarkDown(absl::string_view node, const absl::Status& why) {
  absl::MutexLock lock(&health_->mu);
  NodeHealth& health = health_->nodes[node];
  const absl::Time now = absl::Now();
  // Another client of the table marked it down just now (their batches ran
  // together): one failure, not two.
  if (health.down_until > now) return;
  // An entry still here means no reply since the last failure: consecutive.
  health.backoff = health.backoff == absl::ZeroDuration()
                       ? config_.node_min_backoff
                       : std::min(2 * health.backoff, config_.node_max_backoff);
  health.down_until = now + health.backoff;
  health.last_error = std::string(why.message());
  node_down_events_.fetch_add(1, std::memory_order_relaxed);
}

void RedisCluster::MarkUp(absl::string_view node) {
  absl::MutexLock lock(&health_->mu);
  if (!health_->nodes.empty()) health_->nodes.erase(node);
}

absl::StatusOr<Connection*> RedisCluster::ConnectionTo(const std::string& endpoint) {
  auto it = conns_.find(endpoint);
  if (it != conns_.end() && !it->second->broken()) return it->second.get();
  auto conn = Connection::Open(endpoint, connect_options_);
  if (!conn.ok()) return conn.status();
  connects_.fetch_add(1, std::memory_order_relaxed);
  Connection* raw = conn->get();
  if (it != conns_.end()) {
    // A broken connection may still be referenced by the round in progress:
    // park it until the round's sweep instead of destroying it here.
    parked_.push_back(std::move(it->second));
    it->second = std::move(*conn);
  } else {
    conns_.emplace(endpoint, std::move(*conn));
  }
  return raw;
}

std::vector<std::string> RedisCluster::RefreshCandidates() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& ep) {
    if (std::find(out.begin(), out.end(), ep) == out.end()) out.push_back(ep);
  };
  for (const MasterInfo& m : map_.masters()) add(m.endpoint);
  for (const MasterInfo& m : map_.masters()) {
    for (const std::string& r : m.replicas) add(r);
  }
  for (const std::string& seed : config_.seeds) add(ParseEndpoint(seed)->ToString());
  return out;
}

absl::Status RedisCluster::RefreshLocked(const absl::flat_hash_set<std::string>& skip) {
  const absl::Time now = absl::Now();
  last_refresh_ = now;
  int down = 0;
  absl::Status last = absl::UnavailableError("redis cluster: no node to ask for the slot map");
  for (const std::string& ep : RefreshCandidates()) {
    if (skip.contains(ep)) continue;
    if (DownState(ep, now).has_value()) {
      ++down;
      continue;
    }
    auto conn = ConnectionTo(ep);
    if (!conn.ok()) {
      if (absl::IsUnavailable(conn.status())) MarkDown(ep, conn.status());
      last = conn.status();
      continue;
    }
    auto reply = (*conn)->Command({"CLUSTER", "SLOTS"});
    if (!reply.ok()) {
      if (absl::IsUnavailable(reply.status())) MarkDown(ep, reply.status());
      last = reply.status();
      continue;
    }
    MarkUp(ep);  // it answered, if only with an error
    if ((*reply)->type == REDIS_REPLY_ERROR) {
      last = absl::UnavailableError(absl::StrCat("CLUSTER SLOTS at ", ep, ": ", (*reply)->str));
      continue;
    }
    auto map = SlotMap::FromClusterSlots(**reply, ParseEndpoint(ep)->host);
    if (!map.ok()) {
      last = map.status();
      continue;
    }
    map_ = std::move(*map);
    refreshes_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  refresh_failures_.fetch_add(1, std::memory_order_relaxed);
  return absl::Status(last.code(),
                      absl::StrCat("redis cluster: slot map refresh failed (", down,
                                   " nodes down, not asked); last: ", last.message()));
}

}  // namespace kvtier::tiers::remote
