// Names of the tier kinds, as shown by STATS and kvtierctl and used in error
// messages.
#include "tiers/tier.h"

#include "tiers/io_guard.h"

namespace kvtier::tiers {

std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kHbm:
      return "hbm";
    case TierKind::kHost:
      return "host";
    case TierKind::kNvme:
      return "nvme";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

}  // namespace kvtier::tiers

// io_guard.h
namespace kvtier::tiers {
namespace {
thread_local bool tls_no_disk_io = false;
}  // namespace

NoDiskIoScope::NoDiskIoScope() : prev_(tls_no_disk_io) { tls_no_disk_io = true; }
NoDiskIoScope::~NoDiskIoScope() { tls_no_disk_io = prev_; }
bool DiskIoForbiddenHere() { return tls_no_disk_io; }

}  // namespace kvtier::tiers
