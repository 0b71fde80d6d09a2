// EntryPool: a free list over huge-page chunks of blocks (see entry_pool.h).
#include "tiers/store/internal/entry_pool.h"

#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>

#include "tiers/common/huge_pages.h"

namespace kvtier::tiers {
namespace {

// Under a sanitizer every entry is its own allocation, so a use after free
// of an entry is caught rather than hidden by the pool's reuse.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

}  // namespace

EntryPool::~EntryPool() {
  absl::MutexLock lock(&mu_);
  for (Block* c : chunks_) UnmapHuge(c, kChunkBytes);
}

EntryPool::Block* EntryPool::MapChunk() {
  void* p = MapHuge(kChunkBytes);  // untouched, it costs no RSS
  if (p == nullptr) {
    std::fprintf(stderr, "kvtier: EntryPool: mmap of %zu bytes failed\n", kChunkBytes);
    std::abort();  // like operator new failing: the index cannot grow
  }
  return static_cast<Block*>(p);
}

EntryPool::Block* EntryPool::Take() {
  if (free_ != nullptr) return std::exchange(free_, free_->next_free);
  if (used_in_last_ == kPerChunk) {
    chunks_.push_back(MapChunk());
    used_in_last_ = 0;
  }
  return &chunks_.back()[used_in_last_++];
}

PageEntry* EntryPool::New(const PageKey& key, const PageKey& parent) {
  PageEntry* e;
  if constexpr (kSanitized) {
    e = new PageEntry();
  } else {
    Block* b;
    {
      absl::MutexLock lock(&mu_);
      b = Take();
    }
    e = new (b->bytes) PageEntry();
  }
  e->key = key;
  e->parent = parent;
  return e;
}

void EntryPool::Delete(PageEntry* e) {
  if constexpr (kSanitized) {
    delete e;
    return;
  }
  e->~PageEntry();
  auto* b = reinterpret_cast<Block*>(e);
  absl::MutexLock lock(&mu_);
  b->next_free = free_;
  free_ = b;
}

}  // namespace kvtier::tiers
