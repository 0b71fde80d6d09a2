// Reserved shares: a namespace may reserve bytes in a tier that no other
// namespace's pressure takes from it. Tier-wide victim picks (PUTs and
// promotions making room, demotions into a lower tier, the evictor) see
// each namespace's headroom above its reserve and claim the bytes of the
// page they take until it has left the tier; a namespace's own evictions
// (its quota, an operator's) are its choice and ignore its reserve.
#include "absl/strings/str_cat.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {
namespace {

std::string TierLabel(const Tier& tier, size_t t) {
  return absl::StrCat(std::string(TierName(tier.kind())), " tier ", t);
}

}  // namespace

absl::Status ValidateReserves(const StoreCore &core, const NamespaceConfig &nc,
                              const NamespaceState &ns) {
  for (size_t t = 0; t < core.tiers.size(); ++t) {
    const uint64_t want = ns.reserve[t];
    if (want == 0) continue;
    const Tier &tier = *core.tiers[t]->tier;
    const uint64_t cap = tier.capacity_bytes();
    const std::string where = absl::StrCat("namespace '", nc.name, "': reserve of ", want,
                                           " bytes in ", TierLabel(tier, t));
    if (want > cap) {
      return absl::InvalidArgumentError(absl::StrCat(where, " exceeds its capacity (", cap, ")"));
    }
    if (ns.quota[t] != 0 && want > ns.quota[t]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " exceeds the namespace's quota there (", ns.quota[t], ")"));
    }
    // The others must still be able to run: reserves may not add up to
    // (nearly) the whole tier.
    uint64_t total = want;
    for (const auto &o : core.ns_owned) total += o->reserve[t];
    const auto limit =
        static_cast<uint64_t>(static_cast<double>(cap) * core.config.max_reserved_fraction);
    if (total > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " would bring the tier's reserves to ", total, " bytes, above ",
          core.config.max_reserved_fraction * 100, "% of its capacity (", limit, " bytes)"));
    }
  }
  return absl::OkStatus();
}

uint64_t SlotAccounts::ReserveHeadroom(NamespaceId ns, size_t t) const {
  const NamespaceState *s = core_.Ns(ns);
  if (s == nullptr || s->reserve[t] == 0) return UINT64_MAX;
  // Claimed first: a claim is given back only after its bytes are uncharged,
  // so this order can only under-count the headroom (never go below).
  const uint64_t claimed = s->evicting[t].load();
  const uint64_t used = s->tier_bytes[t].load();
  const uint64_t keep = s->reserve[t] + claimed;
  return used > keep ? used - keep : 0;
}

bool SlotAccounts::ClaimAboveReserve(NamespaceId ns, size_t t, uint64_t bytes) {
  NamespaceState *s = core_.Ns(ns);
  if (s == nullptr || s->reserve[t] == 0) return true;  // nothing to keep, nothing claimed
  uint64_t claimed = s->evicting[t].load();
  do {
    if (s->tier_bytes[t].load() < s->reserve[t] + claimed + bytes) return false;
  } while (!s->evicting[t].compare_exchange_weak(claimed, claimed + bytes));
  return true;
}

void SlotAccounts::ReleaseReserveClaim(NamespaceId ns, size_t t, uint64_t bytes) {
  NamespaceState *s = core_.Ns(ns);
  if (s != nullptr && s->reserve[t] != 0) s->evicting[t].fetch_sub(bytes);
}

}  // namespace kvtier::tiers
