// Sealed shared-cache records: one page of one tenant's KV bytes, encrypted
// and authenticated with the tenant's key (AES-256-GCM), so that access to
// the Redis Cluster alone neither reads nor forges a page, and a record is
// served only as the (namespace, key) it was sealed for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"
#include "tiers/shared_cache/cache_keys.h"

namespace kvtier::tiers::shared_cache {

inline constexpr uint32_t kSealMagic = 0x3153564bu;  // "KVS1" little-endian
inline constexpr uint16_t kSealVersion = 1;
inline constexpr size_t kSealNonceBytes = 12;

// Record layout (little-endian):
//   magic u32 "KVS1", version u16 = 1, reserved u16 = 0, key_id u64,
//   nonce[12], parent[16], body_bytes u64 | ciphertext (body_bytes) | tag[16].
// Associated data = the whole header || u32 len + namespace || key (16 bytes):
// the namespace and key are not stored (the reader knows what it asked for)
// but are authenticated, so a record copied under another name never opens.
inline constexpr size_t kSealHeaderBytes = 4 + 2 + 2 + 8 + 12 + 16 + 8;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kSealOverheadBytes = kSealHeaderBytes + kSealTagBytes;

// Seals `body` as the page `key_of_page` of namespace `ns` with `key`, under
// a fresh random nonce; the returned string is the whole record
// (kSealOverheadBytes + body.size() bytes, allocated once). Random 96-bit
// nonces keep one key safe for about 2^32 records: rotate the cluster secret
// well before a tenant seals that many. InvalidArgument for a namespace over
// 4 GiB or a body over GCM's 64 GiB; Internal if OpenSSL fails.
// Thread-safe: no shared mutable state.
absl::StatusOr<std::string> Seal(const SealKey& key, absl::string_view ns,
                                 const PageKey& key_of_page, const PageKey& parent,
                                 absl::string_view body);
// Seal into `record`, reusing its capacity (a publisher's recycled buffers:
// a fresh 64 KiB allocation per page is a page fault per 4 KiB on a VM, and
// freed bursts of them stay in the allocator). On error `record` is unusable.
absl::Status SealInto(const SealKey& key, absl::string_view ns, const PageKey& key_of_page,
                      const PageKey& parent, absl::string_view body, std::string* record);

// Why an Open failed, for the caller's counters.
enum class OpenFailure { kNone, kOversized, kSize, kFormat, kUnknownKey, kAuthentication };

struct OpenedRecord {
  PageKey parent;
  uint64_t bytes = 0;
};

// Opens `value` as the record of (ns, key) with exactly `expected_bytes` page
// bytes, decrypting straight into `dst` (room for >= expected_bytes bytes).
// Checks, in order, trusting nothing in `value`:
//   longer than kSealOverheadBytes + expected_bytes        -> kOversized
//   any other size mismatch, or header body_bytes mismatch -> kSize
//   magic, version or reserved field                       -> kFormat
//   key_id neither keys.current's nor keys.previous's      -> kUnknownKey
//   GCM tag check (forged, another tenant's, or corrupt)   -> kAuthentication
// Every failure is DataLoss naming the failure, ns and key (hex), with
// *failure saying which; dst's contents are then unspecified (garbage to the
// caller; zeroed on kAuthentication so no unauthenticated plaintext
// lingers). On success *failure = kNone. `failure` may be null. A caller
// error (ns over 4 GiB, null dst) is InvalidArgument, and an OpenSSL failure
// Internal, both with *failure = kNone: no fault of the record.
// Thread-safe: no shared mutable state.
absl::StatusOr<OpenedRecord> Open(const TenantKeys& keys, absl::string_view value,
                                  absl::string_view ns, const PageKey& key,
                                  uint64_t expected_bytes, uint8_t* dst, OpenFailure* failure);

// "none", "oversized", "size", "format", "unknown_key", "authentication":
// stable names for metrics labels.
std::string_view OpenFailureName(OpenFailure f);

}  // namespace kvtier::tiers::shared_cache
