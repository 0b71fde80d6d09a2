// The Redis key that names a shared-cache record: the namespace is in the
// key (so a Redis ACL user can be limited to one tenant's keys) and the keys
// spread over every hash slot. The record itself is sealed (sealed_record.h).
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"

namespace kvtier::tiers::shared_cache {

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

}  // namespace kvtier::tiers::shared_cache
