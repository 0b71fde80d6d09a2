#include "daemon/allocator.h"

#include <malloc.h>

namespace kvtier::daemon {

bool FixAllocatorThresholds() {
  // mallopt returns 1 on success.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace kvtier::daemon
