// Record names (record_key.h).
#include "tiers/shared_cache/record_key.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace kvtier::tiers::shared_cache {

std::string RecordKey(absl::string_view ns, const PageKey& key) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, ns.data(), ns.size());
  XXH3_64bits_update(&st, key.bytes.data(), key.bytes.size());
  const uint64_t h = XXH3_64bits_digest(&st);
  return absl::StrFormat("kvtier:{%04x}:%s:%s", static_cast<unsigned>(h & 0xffff), ns,
                         key.ToHex());
}

std::string AclKeyPattern(absl::string_view ns) {
  std::string out = "kvtier:{????}:";
  for (char c : ns) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back(':');
  out.append(2 * kPageKeyBytes, '?');
  return out;
}

}  // namespace kvtier::tiers::shared_cache
