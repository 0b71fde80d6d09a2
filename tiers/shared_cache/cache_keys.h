// The keys that seal shared-cache records: the cluster secrets a daemon reads
// from its secret file, and the per-tenant AES-256 keys derived from them by
// HKDF, so that a tenant name alone (without this fleet's secret) opens nothing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::tiers::shared_cache {

inline constexpr size_t kClusterSecretBytes = 32;
inline constexpr size_t kSealKeyBytes = 32;

// secrets[0] is current (seals and opens); secrets[1], when present, is the
// previous secret of a rotation (opens only). Never more than two.
struct ClusterSecrets {
  std::vector<std::array<uint8_t, kClusterSecretBytes>> secrets;
};

// A secret file: one or two lines of 64 hex digits (32 bytes); '#' starts a
// comment, blank lines are ignored. First = current, second = previous.
// The file (after symlinks) must be a regular file with no group/other
// permission bits (mode & 077 == 0): otherwise PermissionDenied naming the
// path, its mode and `chmod 600 <path>`. Parse errors name the file and line
// (never the secret's text). Thread-safe.
absl::StatusOr<ClusterSecrets> LoadSecretFile(const std::string& path);

// The parser behind LoadSecretFile; `origin` names the text in errors.
absl::StatusOr<ClusterSecrets> ParseSecrets(absl::string_view text, absl::string_view origin);

struct SealKey {
  std::array<uint8_t, kSealKeyBytes> key{};
  // First 8 bytes (little-endian) of SHA-256("kvtier-seal-key-id" || key):
  // stored in each record so a reader tells "not my key" (a rotation, another
  // fleet, another tenant) from a forgery without trying to decrypt.
  uint64_t id = 0;
};

struct TenantKeys {
  SealKey current;
  std::optional<SealKey> previous;
};

// The key id of `key` (see SealKey::id).
uint64_t SealKeyId(const std::array<uint8_t, kSealKeyBytes>& key);

// key = HKDF-SHA256(ikm = secret, salt = "kvtier-shared-cache-v1",
//                   info = u32 len + tenant + u32 len + tenant_secret),
// lengths little-endian, once per cluster secret. The length prefixes keep
// ("ab", "c") and ("a", "bc") apart. InvalidArgument without a secret or with
// more than two. Thread-safe.
absl::StatusOr<TenantKeys> DeriveTenantKeys(const ClusterSecrets& secrets,
                                           absl::string_view tenant,
                                           absl::string_view tenant_secret);

}  // namespace kvtier::tiers::shared_cache
