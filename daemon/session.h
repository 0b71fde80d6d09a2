// Sessions: one authenticated client connection inside a namespace. Owned and
// touched only by the frontend thread, so no locks; copy jobs take
// shared_ptrs to what they need (a ClientBuffer) instead of the session.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/client_buffer.h"
#include "daemon/tenants.h"
#include "kvtier/layout.h"
#include "tiers/tier_manager.h"

namespace kvtier::daemon {

struct Session {
  std::string id;          // 16 random bytes, secret
  std::string routing_id;  // ZeroMQ peer that opened it
  const Tenant* tenant = nullptr;
  tiers::NamespaceId ns = 0;
  std::optional<Layout> layout;
  uint64_t page_bytes = 0;  // 0 without a layout
  std::string client_name;
  absl::flat_hash_map<uint32_t, std::shared_ptr<ClientBuffer>> buffers;
  uint32_t next_buffer_id = 1;
  absl::Time last_seen;
};

class SessionTable {
 public:
  // Creates a session with a fresh random id.
  Session& Create(std::string routing_id);
  // The session with `id` opened by `routing_id`, or nullptr. A session id
  // presented by a different peer is refused: ids are not bearer tokens.
  Session* Find(absl::string_view id, absl::string_view routing_id);
  void Erase(absl::string_view id);
  // Drops sessions idle since before `cutoff`; returns how many.
  size_t ReapIdle(absl::Time cutoff);
  size_t size() const { return sessions_.size(); }

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
};

}  // namespace kvtier::daemon
