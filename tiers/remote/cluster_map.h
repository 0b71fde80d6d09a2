// The client's picture of a Redis Cluster: "host:port" endpoints, the slot ->
// master map parsed from CLUSTER SLOTS, and the MOVED/ASK redirect errors
// that tell the client its picture is stale.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct redisReply;  // hiredis

namespace kvtier::tiers::remote {

struct Endpoint {
  std::string host;
  int port = 0;
  std::string ToString() const;  // "host:port", "[v6]:port" for IPv6 literals
};

// Parses "host:port" or "[ipv6]:port"; the host must be non-empty and the
// port in 1..65535.
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text);

struct MasterInfo {
  std::string endpoint;               // "host:port"
  std::string id;                     // cluster node id (may be empty on old servers)
  std::vector<std::string> replicas;  // "host:port" of its replicas
};

// Which master serves each of the 16384 slots. A value type: the client
// swaps in a freshly parsed map on refresh.
class SlotMap {
 public:
  SlotMap();

  // Parses a CLUSTER SLOTS reply. Hosts the server leaves empty or "?"
  // (it does not know how it is reached) become `asked_host`, the host the
  // request went to, as the spec says. Fails on a malformed reply or when
  // no slot is covered.
  static absl::StatusOr<SlotMap> FromClusterSlots(const redisReply& reply,
                                                  absl::string_view asked_host);

  // The endpoint of the master serving `slot`; nullptr when none covers it.
  const std::string* MasterOf(uint16_t slot) const;
  // Moves `slot` to `endpoint` (after a MOVED), adding the master if new.
  void Assign(uint16_t slot, absl::string_view endpoint);

  const std::vector<MasterInfo>& masters() const { return masters_; }
  uint32_t covered_slots() const;

 private:
  static constexpr uint16_t kNone = 0xffff;
  uint16_t IndexOf(absl::string_view endpoint);
  absl::Status AddRange(const redisReply& entry, absl::string_view asked_host);

  std::vector<MasterInfo> masters_;
  std::vector<uint16_t> owner_;  // slot -> index into masters_, or kNone
};

struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  uint16_t slot = 0;
  std::string endpoint;  // "host:port"
};

// Parses "MOVED <slot> <host:port>" / "ASK <slot> <host:port>"; an empty host
// (":port", sent when the server does not know its address) becomes
// `asked_host`. nullopt for any other error text.
std::optional<Redirect> ParseRedirect(absl::string_view error, absl::string_view asked_host);

}  // namespace kvtier::tiers::remote
