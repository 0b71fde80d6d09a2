// Session table (frontend thread only).
#include "daemon/session.h"

#include <openssl/rand.h>

#include "absl/container/flat_hash_set.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {

Session& SessionTable::Create(std::string routing_id) {
  std::string id(16, '\0');
  do {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), static_cast<int>(id.size())) != 1)
      spdlog::critical("RAND_bytes failed; session ids would be predictable");
  } while (sessions_.contains(id));
  auto s = std::make_unique<Session>();
  s->id = id;
  s->routing_id = std::move(routing_id);
  s->last_seen = absl::Now();
  Session& ref = *s;
  sessions_.emplace(id, std::move(s));
  return ref;
}

Session* SessionTable::Find(absl::string_view id, absl::string_view routing_id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->routing_id != routing_id) return nullptr;
  return it->second.get();
}

void SessionTable::Erase(absl::string_view id) { sessions_.erase(id); }

size_t SessionTable::ReapIdle(absl::Time cutoff) {
  size_t n = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->last_seen < cutoff) {
      spdlog::info("session of tenant '{}' ({}) expired after idling",
                   it->second->tenant ? it->second->tenant->name : "?", it->second->client_name);
      sessions_.erase(it++);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

}  // namespace kvtier::daemon
