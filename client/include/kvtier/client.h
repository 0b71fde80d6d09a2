// kvtier::Client — the C++ client of kvtierd. It hides the wire format:
// connect and open a session, register a shared-memory buffer, then
// LOOKUP / GET / PUT / DELETE pages by prefix key, and read STATS.
//
// Thread-safety: a Client is NOT thread-safe; use one per thread (each is one
// session over its own ZeroMQ socket). Every call blocks until the daemon
// replies or `timeout` passes. Errors are absl::Status carrying the daemon's
// own message (prefixed "kvtierd: "), or Unavailable when no daemon answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"

namespace kvtier::wire {
class StatsReply;
}

namespace kvtier {

enum class TierKind : uint8_t { kNone = 0, kHbm = 1, kHost = 2, kNvme = 3 };
absl::string_view TierKindName(TierKind t);

struct ClientOptions {
  std::string endpoint;          // empty: DefaultEndpoint() (kvtier/paths.h)
  std::string tenant = "default";
  std::string token;
  std::optional<Layout> layout;  // required for GET/PUT; not for LOOKUP/STATS
  std::string client_name;       // shows up in the daemon's log
  std::chrono::milliseconds timeout{10000};
};

struct LookupResult {
  uint32_t hits = 0;             // leading keys present
  std::vector<TierKind> tiers;   // tier of each hit
};

struct PutResult {
  uint32_t stored = 0;
  uint32_t deduplicated = 0;
  uint32_t not_stored = 0;       // no room: the chain was cut here
};

using BufferId = uint32_t;

class Client {
 public:
  // Connects and sends HELLO. Unauthenticated on a bad tenant/token,
  // Unavailable when no daemon answers within the timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  // sends BYE (best effort)
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& namespace_name() const { return namespace_; }
  uint64_t page_bytes() const { return page_bytes_; }
  uint64_t layout_id() const { return layout_id_; }

  // Asks the daemon to map the shm object `shm_name` ("/name") of `size`
  // bytes, which the caller created (see ShmBuffer). The caller keeps it alive.
  absl::StatusOr<BufferId> RegisterBuffer(const std::string& shm_name, uint64_t size);
  absl::Status UnregisterBuffer(BufferId id);

  // How many leading keys of the chain are cached, and where.
  absl::StatusOr<LookupResult> Lookup(absl::Span<const PageKey> keys);

  // Copies present pages into the buffer at offsets[i] (one per key). Returns
  // each key's tier, kNone for a miss (its bytes in the buffer are untouched).
  absl::StatusOr<std::vector<TierKind>> Get(absl::Span<const PageKey> keys, BufferId buffer,
                                            absl::Span<const uint64_t> offsets);
  // Copies pages from the buffer into the store. keys[0]'s parent is
  // `parent` (zero for a prompt's first page); keys[i]'s parent is keys[i-1].
  absl::StatusOr<PutResult> Put(absl::Span<const PageKey> keys, const PageKey& parent,
                                BufferId buffer, absl::Span<const uint64_t> offsets);

  // Remote-client forms: page bytes travel inline in the messages.
  // GetInline returns one entry per key, empty for a miss.
  absl::StatusOr<std::vector<std::string>> GetInline(absl::Span<const PageKey> keys);
  absl::StatusOr<PutResult> PutInline(absl::Span<const PageKey> keys, const PageKey& parent,
                                      absl::Span<const absl::string_view> pages);

  absl::StatusOr<uint32_t> Delete(absl::Span<const PageKey> keys);
  absl::StatusOr<wire::StatsReply> Stats();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string namespace_;
  uint64_t page_bytes_ = 0;
  uint64_t layout_id_ = 0;
};

}  // namespace kvtier
