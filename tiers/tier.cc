// Names of the tier kinds, as shown by STATS and kvtierctl and used in error
// messages.
#include "tiers/tier.h"

namespace kvtier::tiers {

std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kHbm:
      return "hbm";
    case TierKind::kHost:
      return "host";
    case TierKind::kNvme:
      return "nvme";
  }
  return "unknown";
}

}  // namespace kvtier::tiers
