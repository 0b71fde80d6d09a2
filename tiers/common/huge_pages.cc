// MapHuge: over-map by one huge page, trim to a 2 MiB-aligned range (only
// an aligned range can be one huge page), advise it. See huge_pages.h.
#include "tiers/common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace kvtier::tiers {
namespace {

size_t RoundUp(size_t bytes) { return (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1); }

}  // namespace

void* MapHuge(size_t bytes) {
  const size_t len = RoundUp(bytes);
  void* p = mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (base + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  if (aligned > base) munmap(p, aligned - base);
  const uintptr_t end = base + len + kHugePageBytes;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - aligned - len);
  // Fails harmlessly where THP is off ("never"): 4 KiB pages then.
  madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void UnmapHuge(void* p, size_t bytes) { munmap(p, RoundUp(bytes)); }

}  // namespace kvtier::tiers
