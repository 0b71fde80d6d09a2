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
  absl::flat_hash_map<tiers::TierKind, uint64_t> quota_bytes;
};

class TenantRegistry {
 public:
  // Loads a JSON tenants file:
  //   {"tenants": [{"name": "alice", "token": "…", "admin": false,
  //                 "quota": {"host": "512MiB"}}]}
  // Errors name the file and the offending entry.
  static absl::StatusOr<TenantRegistry> LoadFile(const std::string& path);
  static absl::StatusOr<TenantRegistry> Parse(absl::string_view json, absl::string_view origin);
  // The configuration-free default: one admin tenant "default", no token.
  static TenantRegistry Default();

  // Returns the tenant when `token` matches (constant-time compare), else
  // Unauthenticated. An unknown tenant and a wrong token get the same answer
  // so tenant names cannot be probed.
  absl::StatusOr<const Tenant*> Authenticate(absl::string_view name, absl::string_view token) const;
  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  std::vector<Tenant> tenants_;
};

}  // namespace kvtier::daemon
