// Session table (frontend thread only).
#include "daemon/session.h"

#include <openssl/rand.h>

#include "daemon/request_codec.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

template <typename Map, typename Key>
void Decrement(Map& map, const Key& key, uint64_t by) {
  auto it = map.find(key);
  if (it == map.end()) return;
  if (it->second <= by) map.erase(it);
  else it->second -= by;
}

}  // namespace

std::string LogSafe(absl::string_view text, size_t max_bytes) {
  std::string out = PrintableText(text.substr(0, max_bytes));
  if (text.size() > max_bytes) out += "...";
  return out;
}

Session& SessionTable::Create(std::string routing_id, tiers::NamespaceId ns) {
  std::string id(16, '\0');
  do {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), static_cast<int>(id.size())) != 1)
      spdlog::critical("RAND_bytes failed; session ids would be predictable");
  } while (sessions_.contains(id));
  auto s = std::make_unique<Session>();
  s->id = id;
  s->routing_id = std::move(routing_id);
  s->ns = ns;
  s->last_seen = absl::Now();
  Session& ref = *s;
  sessions_.emplace(id, std::move(s));
  Account(ref, +1);
  return ref;
}

Session* SessionTable::Find(absl::string_view id, absl::string_view routing_id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->routing_id != routing_id) return nullptr;
  return it->second.get();
}

void SessionTable::Account(const Session& s, int sign) {
  if (sign > 0) {
    ++per_peer_[s.routing_id];
    ++per_ns_[s.ns];
    return;
  }
  Decrement(per_peer_, s.routing_id, 1);
  Decrement(per_ns_, s.ns, 1);
  uint64_t bytes = 0;
  for (const auto& [id, b] : s.buffers) bytes += b->size();
  Decrement(registered_, s.ns, bytes);
}

bool SessionTable::Erase(absl::string_view id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  Account(*it->second, -1);
  sessions_.erase(it);
  return true;
}

size_t SessionTable::EraseByPeer(absl::string_view routing_id) {
  if (!HasPeer(routing_id)) return 0;
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_)
    if (s->routing_id == routing_id) ids.push_back(id);
  for (const std::string& id : ids) Erase(id);
  return ids.size();
}

size_t SessionTable::ReapIdle(absl::Time cutoff) {
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_) {
    if (s->last_seen >= cutoff) continue;
    spdlog::info("session of tenant '{}' ({}) expired after idling",
                 s->tenant ? LogSafe(s->tenant->name) : "?", LogSafe(s->client_name));
    ids.push_back(id);
  }
  for (const std::string& id : ids) Erase(id);
  return ids.size();
}

uint32_t SessionTable::AddBuffer(Session& s, std::shared_ptr<ClientBuffer> buffer) {
  registered_[s.ns] += buffer->size();
  const uint32_t id = s.next_buffer_id++;
  s.buffers.emplace(id, std::move(buffer));
  return id;
}

bool SessionTable::RemoveBuffer(Session& s, uint32_t id) {
  auto it = s.buffers.find(id);
  if (it == s.buffers.end()) return false;
  Decrement(registered_, s.ns, it->second->size());
  s.buffers.erase(it);
  return true;
}

size_t SessionTable::SessionsOfPeer(absl::string_view routing_id) const {
  auto it = per_peer_.find(routing_id);
  return it == per_peer_.end() ? 0 : it->second;
}

size_t SessionTable::SessionsOfNamespace(tiers::NamespaceId ns) const {
  auto it = per_ns_.find(ns);
  return it == per_ns_.end() ? 0 : it->second;
}

uint64_t SessionTable::RegisteredBytes(tiers::NamespaceId ns) const {
  auto it = registered_.find(ns);
  return it == registered_.end() ? 0 : it->second;
}

}  // namespace kvtier::daemon
