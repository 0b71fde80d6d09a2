// Eviction policy names and the --eviction flag (eviction_policy.h).
#include "tiers/store/eviction_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvtier::tiers {
namespace {

constexpr EvictionPolicy kAll[] = {EvictionPolicy::kLru, EvictionPolicy::k2q, EvictionPolicy::kArc,
                                   EvictionPolicy::kS3Fifo, EvictionPolicy::kPrefix};

}  // namespace

absl::string_view EvictionPolicyName(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kLru: return "lru";
    case EvictionPolicy::k2q: return "2q";
    case EvictionPolicy::kArc:
      return "arc";
    case EvictionPolicy::kS3Fifo:
      return "s3fifo";
    case EvictionPolicy::kPrefix:
      return "prefix";
  }
  return "?";
}

std::string EvictionPolicyChoices() {
  std::vector<absl::string_view> names;
  for (EvictionPolicy p : kAll) names.push_back(EvictionPolicyName(p));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(absl::string_view name) {
  for (EvictionPolicy p : kAll) {
    if (name == EvictionPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown eviction policy '", name,
                                                 "' (choices: ", EvictionPolicyChoices(), ")"));
}

absl::StatusOr<absl::flat_hash_map<TierKind, EvictionPolicy>> ParseEvictionFlag(
    absl::string_view value, const std::vector<TierKind>& tiers) {
  absl::flat_hash_map<TierKind, EvictionPolicy> out;
  std::vector<std::string> names;
  for (TierKind k : tiers) names.push_back(std::string(TierName(k)));
  const std::string have = absl::StrJoin(names, ", ");
  value = absl::StripAsciiWhitespace(value);
  if (value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eviction is empty (a policy: ", EvictionPolicyChoices(),
                     "; or tier=policy pairs for the tiers ", have, ")"));
  }
  if (value.find('=') == absl::string_view::npos) {  // one policy for every tier
    auto p = ParseEvictionPolicy(value);
    if (!p.ok()) return p.status();
    for (TierKind k : tiers) out[k] = *p;
    return out;
  }
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const absl::string_view tier = absl::StripAsciiWhitespace(kv.first);
    auto it = std::find(names.begin(), names.end(), tier);
    if (it == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--eviction names tier '", tier, "', which this store does not have (its tiers: ", have,
          ")"));
    }
    const TierKind kind = tiers[static_cast<size_t>(it - names.begin())];
    if (out.contains(kind)) {
      return absl::InvalidArgumentError(absl::StrCat("--eviction names tier '", tier, "' twice"));
    }
    auto p = ParseEvictionPolicy(absl::StripAsciiWhitespace(kv.second));
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--eviction for tier '", tier, "': ", p.status().message()));
    }
    out[kind] = *p;
  }
  return out;
}

}  // namespace kvtier::tiers
