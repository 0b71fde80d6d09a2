// A Redis Cluster client for the shared cache: routes each key to the master
// serving its hash slot and runs a batch as one pipeline per node touched,
// following MOVED/ASK redirects and riding out failovers. A small slot router
// of our own over hiredis (Debian ships no cluster-aware C/C++ client).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tiers/remote/cluster_map.h"
#include "tiers/remote/redis_conn.h"

namespace kvtier::tiers::remote {

// A node that failed and has not answered since.
struct NodeHealth {
  absl::Time down_until;
  absl::Duration backoff;  // the last one applied
  std::string last_error;
};

// Which nodes are down, shared by the clients of one user (a shared cache's
// link has one client per thread): a node one of them found hung is skipped
// by all of them for its backoff, so each does not pay its own timeout. Its
// lock is a leaf: taken inside a client's, never the other way round.
struct NodeHealthTable {
  absl::Mutex mu;
  // Failed nodes until they answer again (a few entries at most).
  absl::flat_hash_map<std::string, NodeHealth> nodes ABSL_GUARDED_BY(mu);
};

struct RedisClusterConfig {
  // Nodes to ask for the slot map at start and when every known node fails:
  // "host:port" or "[ipv6]:port". Any node of the cluster will do.
  std::vector<std::string> seeds;
  absl::Duration connect_timeout = absl::Milliseconds(500);
  // Bounds each blocking socket read and write (SO_RCVTIMEO/SO_SNDTIMEO). A
  // hung node costs a batch about one command_timeout (plus connect_timeout
  // for a new connection); then it is down (below) and costs nothing more
  // until its probe.
  absl::Duration command_timeout = absl::Seconds(2);
  // A node whose round trip fails with an I/O error (timeout, refused,
  // reset, EOF) is down for node_min_backoff, doubled per consecutive
  // failure up to node_max_backoff: its keys fail at once, unsent, and map
  // refreshes skip it. The first batch routing keys to it after that is its
  // probe (one round trip: success clears it, failure doubles the backoff).
  // While keys route to a down master the slot map is reloaded at most once
  // per node_min_backoff, so a failover to a replica is picked up without
  // waiting for the probe.
  absl::Duration node_min_backoff = absl::Milliseconds(200);
  absl::Duration node_max_backoff = absl::Seconds(5);
  // Shared with other clients of the same cluster; null: this client's own.
  std::shared_ptr<NodeHealthTable> shared_health;
  int max_redirects = 5;  // MOVED/ASK hops per key before giving up
  std::string user;       // ACL user (per-tenant users); empty: "default"
  std::string password;   // empty: no AUTH

  absl::Status Validate() const;
};

// Counters since Create; a snapshot (each field read atomically, not the set).
struct RedisClusterStats {
  uint64_t requests = 0;   // key commands sent (a redirected key counts again)
  uint64_t pipelines = 0;  // node round trips: one per node touched per round
  uint64_t moved = 0;      // MOVED replies followed
  uint64_t ask = 0;        // ASK replies followed
  uint64_t refreshes = 0;  // slot maps loaded from CLUSTER SLOTS
  uint64_t refresh_failures = 0;
  uint64_t connects = 0;  // connections opened
  uint64_t errors = 0;    // per-key errors returned
  uint64_t node_down_events = 0;  // nodes marked down (a failed probe counts again)
  uint64_t fast_failed = 0;       // keys failed unsent, their node down (also in errors)
  uint64_t forbidden_io = 0;      // batches run inside a NoNetworkIoScope (a bug; tests assert 0)
};

// Threads that must never wait on the network (kvtierd's frontend) say so
// with a NoNetworkIoScope; a batch run on such a thread anyway is counted
// (RedisClusterStats::forbidden_io), so tests can prove it never happens.
class NoNetworkIoScope {
 public:
  NoNetworkIoScope();
  ~NoNetworkIoScope();
  NoNetworkIoScope(const NoNetworkIoScope&) = delete;
  NoNetworkIoScope& operator=(const NoNetworkIoScope&) = delete;

 private:
  bool prev_;
};
bool NetworkIoForbiddenHere();

// A pair for MultiSet. Views: the bytes must outlive the call (they are
// copied once, into the node's pipeline buffer).
struct KeyValue {
  absl::string_view key;
  absl::string_view value;  // binary-safe
};

// Thread-safe: every call holds one mutex for its whole batch, so calls on
// one object run one at a time (use several objects for parallel batches).
// No call throws or blocks past the configured timeouts, and a dead or hung
// node costs them once per backoff period, not once per batch (the health
// of each node is per object). Per-key failures are Status values:
// Unavailable for what may pass (node down or hung, CLUSTERDOWN, TRYAGAIN,
// too many redirects), naming the key's slot and node.
class RedisCluster {
 public:
  // Validates `config` and loads the slot map from the first seed that
  // answers. Unavailable when none does; PermissionDenied when AUTH fails.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Create(const RedisClusterConfig& config);

  // GET of each key: its value, or nullopt when absent. Result i is key i's.
  std::vector<absl::StatusOr<std::optional<std::string>>> MultiGet(
      absl::Span<const std::string> keys);
  // MultiGet without copying the values: `on_value(i, value)` runs once per
  // key, on the calling thread, with a view of key i's value that is valid
  // only during that call (nullopt: absent), or its error. For readers that
  // check a value and copy its bytes straight to where they go.
  using ValueFn =
      absl::FunctionRef<void(size_t, absl::StatusOr<std::optional<absl::string_view>>)>;
  void VisitGet(absl::Span<const std::string> keys, ValueFn on_value);
  // VisitGet that never reads a value whole past `max_value_bytes`, so a
  // hostile or corrupt giant value costs no more memory than a legal one:
  // sends GETRANGE key 0 <max_value_bytes>. Its end is inclusive, so at most
  // max_value_bytes + 1 bytes come back and a value longer than
  // max_value_bytes is seen with exactly that many: the caller must refuse
  // any value longer than max_value_bytes (it is cut short). GETRANGE
  // answers an empty string for a missing key, so an empty value, stored or
  // not, is reported absent (nullopt). Same callback contract as VisitGet.
  void VisitGetCapped(absl::Span<const std::string> keys, uint64_t max_value_bytes,
                      ValueFn on_value);
  // SET of each pair (PX `ttl` when given; it must be >= 1 ms).
  std::vector<absl::Status> MultiSet(absl::Span<const KeyValue> kvs,
                                     std::optional<absl::Duration> ttl = std::nullopt);
  // EXISTS of each key.
  std::vector<absl::StatusOr<bool>> MultiExists(absl::Span<const std::string> keys);
  // UNLINK of each key: true when it existed.
  std::vector<absl::StatusOr<bool>> MultiDelete(absl::Span<const std::string> keys);

  // Reloads the slot map from CLUSTER SLOTS now.
  absl::Status Refresh() ABSL_LOCKS_EXCLUDED(mu_);
  // Opens the connection to every master of the slot map now (otherwise
  // each opens at the first key routed to it), so a long-running client's
  // connections are all there from its start. The first error, after
  // trying every master; a master that fails is connected lazily later.
  absl::Status ConnectMasters() ABSL_LOCKS_EXCLUDED(mu_);
  // The nodes ("host:port") this client holds a connection to now, sorted
  // (waits for a batch in progress).
  std::vector<std::string> ConnectedNodes() const ABSL_LOCKS_EXCLUDED(mu_);
  SlotMap slot_map() const ABSL_LOCKS_EXCLUDED(mu_);  // a copy
  RedisClusterStats stats() const;
  // The nodes ("host:port") down now: their keys fail at once until their
  // backoff passes. Sorted. Thread-safe, and never waits for a batch.
  std::vector<std::string> DownNodes() const;

 private:
  // One key's command; argv[1] is the key, which picks the slot.
  struct KeyCommand {
    std::array<absl::string_view, 5> argv;
    int argc = 0;
  };
  // Where a key's command goes in the next round of a batch.
  struct Route {
    size_t index = 0;
    std::string node;
    bool asking = false;  // send ASKING first (an ASK redirect)
    int redirects = 0;
  };
  using ReplyFn = absl::FunctionRef<void(size_t, absl::StatusOr<const redisReply*>)>;
  struct Round;  // one round's bookkeeping (cluster_batch.cc)
  explicit RedisCluster(const RedisClusterConfig& config);

  // Runs `cmds`, calling `on_reply` exactly once per command, with its final
  // reply (never a redirect) or its error. String replies of at least
  // `direct_min` bytes (> 0) skip hiredis's copies (Connection::ReadLarge).
  void RunBatch(absl::Span<const KeyCommand> cmds, ReplyFn on_reply, size_t direct_min = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // VisitGet's and VisitGetCapped's batch; `empty_is_absent` for GETRANGE.
  void VisitValues(absl::Span<const KeyCommand> cmds, bool empty_is_absent, ValueFn on_value,
                   size_t direct_min = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts each key of the batch in round.todo, at its slot's master.
  void RouteKeys(Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a key of `slots` is at a down master and no refresh ran in the
  // last node_min_backoff (its slots may have failed over meanwhile).
  bool RecheckMap(absl::Span<const uint16_t> slots, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends and flushes each node's commands (one pipeline per node).
  void SendRound(Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads every flushed node's replies; redirected keys go to round.next.
  void ReadRound(Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleReply(const Route& route, const redisReply& reply, Round& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails `routes` (all at one node) with `why`; an I/O error marks it down.
  void FailKeys(absl::Span<const Route* const> routes, const absl::Status& why, Round& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails `routes`, all at one down node, without sending them.
  void FastFail(absl::Span<const Route* const> routes, const NodeHealth& down, absl::Time now,
                Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Node health (redis_cluster.cc), under its own mutex so that DownNodes
  // never waits for a batch; taken inside mu_, never the other way round.
  //
  // `node`'s state when it is down at `now`; nullopt when it may be tried.
  std::optional<NodeHealth> DownState(absl::string_view node, absl::Time now) const;
  bool AnyDown(absl::Time now) const;
  // After an I/O error: down for the next backoff (doubled if it had failed
  // before without answering since).
  void MarkDown(absl::string_view node, const absl::Status& why);
  // After a reply: healthy, backoff reset.
  void MarkUp(absl::string_view node);

  absl::StatusOr<Connection*> ConnectionTo(const std::string& endpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads the map from the first node answering, skipping `skip` (nodes that
  // just failed) and down nodes: a hung one would cost a timeout each time.
  absl::Status RefreshLocked(const absl::flat_hash_set<std::string>& skip)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> RefreshCandidates() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees broken and parked connections (between rounds only).
  void SweepConnections() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RedisClusterConfig config_;
  const ConnectOptions connect_options_;
  mutable absl::Mutex mu_;
  SlotMap map_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Connection>> conns_ ABSL_GUARDED_BY(mu_);
  // Replaced broken connections, freed when no round can point at them.
  std::vector<std::unique_ptr<Connection>> parked_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refresh_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // last attempt

  // The config's shared table, or this client's own.
  const std::shared_ptr<NodeHealthTable> health_;

  std::atomic<uint64_t> requests_{0}, pipelines_{0}, moved_{0}, ask_{0}, refreshes_{0},
      refresh_failures_{0}, connects_{0}, errors_{0}, node_down_events_{0}, fast_failed_{0},
      forbidden_io_{0};
};

}  // namespace kvtier::tiers::remote
