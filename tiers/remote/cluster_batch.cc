// The batch engine: each round groups the pending keys by node, appends all
// of a node's commands to its pipeline, flushes every node, then reads the
// replies node by node. MOVED/ASK send a key to another round; anything
// else ends it. One round trip per node touched, per round; none to a node
// that is down (its keys fail at once).
#include <hiredis/hiredis.h>

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tiers/remote/crc16.h"
#include "tiers/remote/redis_cluster.h"

namespace kvtier::tiers::remote {

struct RedisCluster::Round {
  explicit Round(ReplyFn fn) : on_reply(fn) {}
  ReplyFn on_reply;
  absl::Span<const KeyCommand> cmds;
  size_t direct_min = 0;  // Connection::ReadLarge's; 0: hiredis reads every reply
  std::vector<Route> todo;
  // Per node flushed: its connection and the routes in append order.
  std::vector<std::pair<Connection*, std::vector<const Route*>>> sent;
  std::vector<Route> next;                  // redirected keys
  absl::flat_hash_set<std::string> failed;  // nodes that failed this round
  bool refresh = false;
};

namespace {

absl::Status KeyError(absl::StatusCode code, uint16_t slot, absl::string_view node,
                      absl::string_view what) {
  return absl::Status(code, absl::StrCat("redis cluster: slot ", slot, " at ", node, ": ", what));
}

// Error replies that a retry later may cure: the cluster (or the slot) is
// down, a multi-key op met a migration, the node is loading, a replica lost
// its master.
bool IsTransient(absl::string_view text) {
  for (absl::string_view prefix : {"CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN"}) {
    if (absl::StartsWith(text, prefix)) return true;
  }
  return false;
}

// The status of a key whose command got error reply `text` (and will not be
// redirected again).
absl::Status ErrorReplyStatus(absl::string_view text, bool redirect, uint16_t slot,
                              absl::string_view node) {
  if (redirect) {
    return KeyError(absl::StatusCode::kUnavailable, slot, node,
                    absl::StrCat("too many redirects (last: ", text, ")"));
  }
  if (IsTransient(text)) return KeyError(absl::StatusCode::kUnavailable, slot, node, text);
  if (absl::StartsWith(text, "NOAUTH") || absl::StartsWith(text, "NOPERM")) {
    return KeyError(absl::StatusCode::kPermissionDenied, slot, node, text);
  }
  return KeyError(absl::StatusCode::kInternal, slot, node, text);
}

// The reply to a key's command. After ASKING, its +OK comes first and is
// dropped (were it an error, the key's own reply says why). With
// direct_min, a long string comes back in *bulk with a null reply.
absl::StatusOr<ReplyPtr> ReadKeyReply(Connection& conn, bool asking, size_t direct_min,
                                      absl::string_view* bulk) {
  if (asking) {
    absl::StatusOr<ReplyPtr> ok = conn.Read();
    if (!ok.ok()) return ok.status();
  }
  return direct_min > 0 ? conn.ReadLarge(direct_min, bulk) : conn.Read();
}

}  // namespace

void RedisCluster::RunBatch(absl::Span<const KeyCommand> cmds, ReplyFn on_reply,
                            size_t direct_min) {
  if (NetworkIoForbiddenHere()) forbidden_io_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  Round round(on_reply);
  round.cmds = cmds;
  round.direct_min = direct_min;
  RouteKeys(round);
  while (!round.todo.empty()) {
    SendRound(round);
    ReadRound(round);
    if (round.refresh) (void)RefreshLocked(round.failed);  // failures counted there
    SweepConnections();
    round.todo = std::move(round.next);
    round.next.clear();
    round.sent.clear();
    round.refresh = false;
  }
}

void RedisCluster::RouteKeys(Round& round) {
  std::vector<uint16_t> slots(round.cmds.size());
  bool unmapped = false;
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i] = KeySlot(round.cmds[i].argv[1]);
    unmapped |= map_.MasterOf(slots[i]) == nullptr;
  }
  // A slot nobody served at the last refresh may have a master by now, and
  // a down master's slots may have failed over to a replica.
  if (unmapped || RecheckMap(slots, absl::Now())) (void)RefreshLocked({});
  round.todo.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string* master = map_.MasterOf(slots[i]);
    if (master == nullptr) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      round.on_reply(
          i, KeyError(absl::StatusCode::kUnavailable, slots[i], "-", "no master serves it"));
      continue;
    }
    round.todo.push_back(Route{i, *master, false, 0});
  }
}

bool RedisCluster::RecheckMap(absl::Span<const uint16_t> slots, absl::Time now) {
  if (now - last_refresh_ < config_.node_min_backoff || !AnyDown(now)) return false;
  absl::flat_hash_set<absl::string_view> masters;
  for (uint16_t slot : slots) {
    if (const std::string* master = map_.MasterOf(slot)) masters.insert(*master);
  }
  for (absl::string_view master : masters) {
    if (DownState(master, now).has_value()) return true;
  }
  return false;
}

void RedisCluster::SendRound(Round& round) {
  absl::flat_hash_map<absl::string_view, std::vector<const Route*>> by_node;
  for (const Route& route : round.todo) by_node[route.node].push_back(&route);
  const absl::Time now = absl::Now();
  for (auto& [node, routes] : by_node) {
    // Checked here, not when routing, so that redirects to it fail fast too.
    if (std::optional<NodeHealth> down = DownState(node, now)) {
      FastFail(routes, *down, now, round);
      continue;
    }
    auto conn = ConnectionTo(std::string(node));
    if (!conn.ok()) {
      FailKeys(routes, conn.status(), round);
      continue;
    }
    for (const Route* route : routes) {
      if (route->asking) (*conn)->Append({"ASKING"});
      const KeyCommand& cmd = round.cmds[route->index];
      (*conn)->Append(absl::MakeConstSpan(cmd.argv.data(), cmd.argc));
    }
    requests_.fetch_add(routes.size(), std::memory_order_relaxed);
    absl::Status flushed = (*conn)->Flush();
    if (!flushed.ok()) {
      FailKeys(routes, flushed, round);
      continue;
    }
    pipelines_.fetch_add(1, std::memory_order_relaxed);
    round.sent.emplace_back(*conn, std::move(routes));
  }
}

void RedisCluster::ReadRound(Round& round) {
  for (auto& [conn, routes] : round.sent) {
    bool answered = true;
    for (size_t k = 0; k < routes.size(); ++k) {
      absl::string_view bulk;
      absl::StatusOr<ReplyPtr> reply =
          ReadKeyReply(*conn, routes[k]->asking, round.direct_min, &bulk);
      if (!reply.ok()) {
        // The connection is gone: this key and every later one on it fail.
        FailKeys(absl::MakeConstSpan(routes).subspan(k), reply.status(), round);
        answered = false;
        break;
      }
      if (*reply != nullptr) {
        HandleReply(*routes[k], **reply, round);
      } else {  // read straight into the connection's buffer: a string
        redisReply string{};
        string.type = REDIS_REPLY_STRING;
        string.str = const_cast<char*>(bulk.data());
        string.len = bulk.size();
        HandleReply(*routes[k], string, round);
      }
    }
    if (answered) MarkUp(conn->endpoint());  // a probe that passed clears the node
  }
}

void RedisCluster::HandleReply(const Route& route, const redisReply& reply, Round& round) {
  if (reply.type != REDIS_REPLY_ERROR) {
    round.on_reply(route.index, &reply);
    return;
  }
  const absl::string_view text(reply.str, reply.len);
  const std::string asked_host = ParseEndpoint(route.node).value_or(Endpoint{}).host;
  std::optional<Redirect> redirect = ParseRedirect(text, asked_host);
  if (redirect.has_value() && route.redirects < config_.max_redirects) {
    const bool moved = redirect->kind == Redirect::Kind::kMoved;
    (moved ? moved_ : ask_).fetch_add(1, std::memory_order_relaxed);
    if (moved) {
      map_.Assign(redirect->slot, redirect->endpoint);  // at once; the refresh brings the rest
      round.refresh = true;
    }
    round.next.push_back(Route{route.index, redirect->endpoint, !moved, route.redirects + 1});
    return;
  }
  errors_.fetch_add(1, std::memory_order_relaxed);
  const uint16_t slot = KeySlot(round.cmds[route.index].argv[1]);
  round.on_reply(route.index, ErrorReplyStatus(text, redirect.has_value(), slot, route.node));
}

void RedisCluster::FailKeys(absl::Span<const Route* const> routes, const absl::Status& why,
                            Round& round) {
  if (routes.empty()) return;
  round.failed.insert(routes.front()->node);
  // Unavailable is what Connection returns for I/O errors (timeout, refused,
  // reset, EOF); a refused AUTH is an answer, not a dead node.
  if (absl::IsUnavailable(why)) MarkDown(routes.front()->node, why);
  round.refresh = true;  // a failover may have moved these slots
  errors_.fetch_add(routes.size(), std::memory_order_relaxed);
  for (const Route* route : routes) {
    const uint16_t slot = KeySlot(round.cmds[route->index].argv[1]);
    round.on_reply(route->index,
                   KeyError(absl::StatusCode::kUnavailable, slot, route->node, why.message()));
  }
}

void RedisCluster::FastFail(absl::Span<const Route* const> routes, const NodeHealth& down,
                            absl::Time now, Round& round) {
  // No refresh: RouteKeys rechecks the map once per node_min_backoff.
  const int64_t retry_ms =
      absl::ToInt64Milliseconds(absl::Ceil(down.down_until - now, absl::Milliseconds(1)));
  const std::string what =
      absl::StrCat("down, retry in ", retry_ms, " ms (last error: ", down.last_error, ")");
  errors_.fetch_add(routes.size(), std::memory_order_relaxed);
  fast_failed_.fetch_add(routes.size(), std::memory_order_relaxed);
  for (const Route* route : routes) {
    const uint16_t slot = KeySlot(round.cmds[route->index].argv[1]);
    round.on_reply(route->index, KeyError(absl::StatusCode::kUnavailable, slot, route->node, what));
  }
}

}  // namespace kvtier::tiers::remote
