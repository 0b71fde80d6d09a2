// `remote_get`'s baseline: the natural raw hiredis client of a Redis Cluster.
// One connection per master (from CLUSTER SLOTS), each key's GET sent to its
// slot's master, pipelined per node (send all, then read all). The names of
// kvtierd's records come from the key rule docs/OPERATIONS.md documents, so
// this client is also a check of the doc (tools never link tiers/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kvtier/page_key.h"

struct redisContext;

namespace kvtier::bench {

// docs/OPERATIONS.md, "Record format": kvtier:{<4 hex>}:<namespace>:<hex key>,
// the tag "16 bits of a hash of (namespace, key)". The doc names no hash: the
// low 16 bits of xxh3-64 over the namespace bytes then the 16 key bytes, as
// tiers/shared_cache/record_key.cc computes it. `remote_get` fails when a
// name made here is not in the cluster, so a drift between the two shows.
std::string DocumentedRecordKey(absl::string_view ns, const PageKey& key);
// The sealed record's header before the (encrypted) page bytes: 52 bytes
// (docs/OPERATIONS.md, "Record format"); a 16-byte tag follows them.
inline uint64_t DocumentedHeaderBytes(absl::string_view) { return 52; }
inline constexpr uint64_t kDocumentedTagBytes = 16;
// Redis Cluster's hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
uint16_t ClusterSlot(absl::string_view key);

class RawCluster {
 public:
  ~RawCluster();
  // Connects to every master listed by the first seed that answers.
  static absl::StatusOr<std::unique_ptr<RawCluster>> Connect(const std::vector<std::string>& seeds);
  size_t masters() const { return nodes_.size(); }
  // Keys that do not exist (EXISTS per key, pipelined per node).
  absl::StatusOr<size_t> CountMissing(const std::vector<std::string>& keys);
  // GET of keys[i] in rounds of `batch` keys; the value's bytes past `skip`
  // (the record header) are copied to dst[i], exactly `bytes` of them.
  absl::Status GetInto(const std::vector<std::string>& keys, size_t batch, uint64_t skip,
                       uint64_t bytes, absl::Span<uint8_t* const> dst);

 private:
  struct Node {
    std::string addr;
    redisContext* ctx = nullptr;
  };
  RawCluster() = default;
  absl::Status LoadSlots(redisContext* seed);
  size_t NodeOf(absl::string_view key) const { return slot_node_[ClusterSlot(key)]; }
  // Sends `cmd <key>` for keys [b, e) to their masters, then reads the
  // replies per node in send order; `each(i, reply)` sees each.
  template <typename F>
  absl::Status Round(const char* cmd, const std::vector<std::string>& keys, size_t b, size_t e,
                     F&& each);

  std::vector<Node> nodes_;
  std::vector<uint16_t> slot_node_ = std::vector<uint16_t>(16384, 0);
};

}  // namespace kvtier::bench
