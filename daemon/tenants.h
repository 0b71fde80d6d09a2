// Tenants and their tokens. Each tenant is one namespace; the namespace of a
// session is decided here at HELLO and never taken from a request field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tiers/tier.h"

namespace kvtier::daemon {

struct Tenant {
  std::string name;
  std::string token;  // empty: no token needed (only the built-in default)
  bool admin = false;
  // Per tier; a quota given for one tier also bounds the tiers below it
  // unless they have their own (the daemon fills that in).
  absl::flat_hash_map<tiers::TierKind, uint64_t> quota_bytes;
  // Bytes per tier that no other tenant's pressure may evict.
  absl::flat_hash_map<tiers::TierKind, uint64_t> reserved_bytes;
  // Overrides of the daemon-wide per-tenant limits; 0 = the daemon's flag.
  uint32_t max_sessions = 0;
  uint64_t max_registered_bytes = 0;
  // The Redis ACL user (and its password) this tenant's remote-tier records
  // are read and written as; empty: the daemon's --remote_user.
  std::string redis_user, redis_password;
  // Z85 CURVE public key this tenant authenticates with when the daemon
  // runs CURVE (--curve_secret_key_file); empty: none.
  std::string curve_public_key;
};

class TenantRegistry {
 public:
  // Loads a JSON tenants file:
  //   {"tenants": [{"name": "alice", "token": "…", "admin": false,
  //                 "quota": {"host": "512MiB"}, "reserve": {"host": "64MiB"},
  //                 "max_sessions": 32, "max_registered_bytes": "64GiB",
  //                 "redis_user": "kvtier-alice", "redis_password": "…"}]}
  // Errors name the file and the offending entry.
  static absl::StatusOr<TenantRegistry> LoadFile(const std::string& path);
  static absl::StatusOr<TenantRegistry> Parse(absl::string_view json, absl::string_view origin);
  // The configuration-free default: one admin tenant "default", no token.
  static TenantRegistry Default();

  // Returns the tenant when `token` matches (constant-time compare), else
  // Unauthenticated. An unknown tenant and a wrong token get the same answer
  // so tenant names cannot be probed.
  absl::StatusOr<const Tenant*> Authenticate(absl::string_view name, absl::string_view token) const;
  // The tenant named `name`, or nullptr (no token check: for a connection
  // the handshake authenticated already).
  const Tenant* Find(absl::string_view name) const;
  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  std::vector<Tenant> tenants_;
};

}  // namespace kvtier::daemon
