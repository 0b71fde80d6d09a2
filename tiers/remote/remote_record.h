// The remote tier's record: one Redis value per page, self-describing so
// that any node sharing the cluster can tell whose page a value is and
// whether it is intact before serving a byte of it; and the Redis key that
// names it (namespace in the key, keys spread over every hash slot).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"

namespace kvtier::tiers::remote {

inline constexpr uint32_t kRecordMagic = 0x5254564bu;  // "KVTR" little-endian
inline constexpr uint16_t kRecordVersion = 1;
// magic u32, version u16, namespace length u16, key, parent, page bytes u64,
// xxh3-64 of the page bytes u64; then the namespace name, then the bytes.
// Little-endian. The bytes are the page as PUT: the record says nothing of
// the layout (the namespace's clients agree on it, as they do locally).
inline constexpr size_t kFixedHeaderBytes = 4 + 2 + 2 + 2 * kPageKeyBytes + 8 + 8;
inline constexpr size_t kMaxNamespaceBytes = 0xffff;

// "kvtier:{<4 hex>}:<ns>:<hex key>". The hash tag is 16 bits of a hash of
// (namespace, key), so one namespace's pages spread over every slot (a tag
// over the whole name would put them all on one node), and a namespace name
// holding braces cannot choose the slot.
std::string RecordKey(absl::string_view ns, const PageKey& key);
// The Redis ACL key pattern (without the leading '~') matching exactly the
// record keys of namespace `ns`: "kvtier:{????}:<ns>:" then 32 '?', glob
// characters of the name escaped. Exact, so a tenant "a" is not granted
// the keys of a tenant "a:b".
std::string AclKeyPattern(absl::string_view ns);

struct RecordInfo {
  absl::string_view ns;
  PageKey key;
  PageKey parent;
  uint64_t checksum = 0;  // xxh3-64 of `body`
};

// The header of a record for `body_bytes` page bytes; value = header + body.
std::string EncodeHeader(const RecordInfo& info, uint64_t body_bytes);

struct ParsedRecord {
  RecordInfo info;
  absl::string_view body;  // views into the value
};

// Parses a value and checks its body against its checksum. DataLoss names
// what is wrong (magic, version, truncation, checksum): never trust it then.
absl::StatusOr<ParsedRecord> ParseRecord(absl::string_view value);

// ParseRecord, then checks the record is the page asked for: namespace, key
// and size. A record of another namespace is DataLoss too (never served).
absl::StatusOr<ParsedRecord> ParseExpected(absl::string_view value, absl::string_view ns,
                                           const PageKey& key, uint64_t bytes);

}  // namespace kvtier::tiers::remote
