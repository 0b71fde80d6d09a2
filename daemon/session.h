// Sessions: one authenticated client connection inside a namespace. Owned and
// touched only by the frontend thread, so no locks; copy jobs take
// shared_ptrs to what they need (a ClientBuffer) instead of the session.
//
// The table also keeps what limits are counted against: sessions per peer
// connection and per namespace, and bytes of client memory registered per
// namespace. Every way a session or a registration ends goes through it, so
// those counts cannot drift.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/client_buffer.h"
#include "daemon/peers.h"
#include "daemon/tenants.h"
#include "kvtier/layout.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

struct Session {
  std::string id;          // 16 random bytes, secret
  std::string routing_id;  // ZeroMQ peer that opened it
  // The connection that opened it: every request must come over it (a new
  // connection presenting the routing id of a closed one is another peer).
  ConnectionId connection;
  const Tenant* tenant = nullptr;
  tiers::NamespaceId ns = 0;
  std::optional<Layout> layout;
  uint64_t page_bytes = 0;  // 0 without a layout
  std::string client_name;  // as sent; escape before logging (LogSafe)
  // Registered buffers; add and remove through SessionTable (accounting).
  absl::flat_hash_map<uint32_t, std::shared_ptr<ClientBuffer>> buffers;
  uint32_t next_buffer_id = 1;
  absl::Time last_seen;
};

class SessionTable {
 public:
  // Creates a session of namespace `ns` with a fresh random id.
  Session& Create(std::string routing_id, tiers::NamespaceId ns);
  // The session with `id` opened by `routing_id`, or nullptr. A session id
  // presented by a different peer is refused: ids are not bearer tokens.
  Session* Find(absl::string_view id, absl::string_view routing_id);
  // Ends a session (its registrations with it); false if there was none.
  bool Erase(absl::string_view id);
  // Ends every session `routing_id` opened (its connection closed); returns
  // how many.
  size_t EraseByPeer(absl::string_view routing_id);
  // Drops sessions idle since before `cutoff`; returns how many.
  size_t ReapIdle(absl::Time cutoff);

  // Registrations, counted against the session's namespace.
  uint32_t AddBuffer(Session& s, std::shared_ptr<ClientBuffer> buffer);
  bool RemoveBuffer(Session& s, uint32_t id);

  size_t size() const { return sessions_.size(); }
  size_t SessionsOfPeer(absl::string_view routing_id) const;
  size_t SessionsOfNamespace(tiers::NamespaceId ns) const;
  uint64_t RegisteredBytes(tiers::NamespaceId ns) const;
  bool HasPeer(absl::string_view routing_id) const { return SessionsOfPeer(routing_id) > 0; }

 private:
  void Account(const Session& s, int sign);
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  absl::flat_hash_map<std::string, size_t> per_peer_;
  absl::flat_hash_map<tiers::NamespaceId, size_t> per_ns_;
  absl::flat_hash_map<tiers::NamespaceId, uint64_t> registered_;
};

// `text` (a client-chosen string) made safe for one log line: control and
// non-ASCII bytes escaped, length capped.
std::string LogSafe(absl::string_view text, size_t max_bytes = 128);

}  // namespace kvtier::daemon
