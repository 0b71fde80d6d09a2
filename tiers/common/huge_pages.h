// Index memory on transparent huge pages. At millions of entries, LOOKUP
// and eviction touch the index at random: with 4 KiB pages each touch is
// also a TLB miss whose page walk may miss the cache too (1.4 GiB of index
// at 10M pages is 370k small pages). The entry pool's chunks and the
// shards' large hash tables are therefore 2 MiB-aligned mappings advised
// MADV_HUGEPAGE. Best effort: with THP off, 4 KiB pages serve as before.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace kvtier::tiers {

inline constexpr size_t kHugePageBytes = 2 << 20;

// `bytes` (rounded up to whole huge pages) of zero-filled, 2 MiB-aligned
// anonymous memory advised as huge pages; nullptr when mmap fails.
void* MapHuge(size_t bytes);
// Unmaps what MapHuge(bytes) returned.
void UnmapHuge(void* p, size_t bytes);

// An allocator for the index's hash tables: arrays of kMinBytes and more come
// from MapHuge (and go back to the system when the table grows), smaller
// ones from std::allocator.
template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  static constexpr size_t kMinBytes = 2 * kHugePageBytes;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n * sizeof(T) < kMinBytes) return std::allocator<T>().allocate(n);
    void* p = MapHuge(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kMinBytes) return std::allocator<T>().deallocate(p, n);
    UnmapHuge(p, n * sizeof(T));
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

}  // namespace kvtier::tiers
