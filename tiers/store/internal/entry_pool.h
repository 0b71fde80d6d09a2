// EntryPool: the memory of the index's entries. Fixed-size blocks carved
// from 2 MiB chunks, so an indexed page costs sizeof(PageEntry) and nothing
// more (glibc's malloc adds 16 bytes a page: its header and rounding); the
// chunks are huge pages (huge_pages.h). Freed blocks are reused; chunks go
// back only with the pool.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/page_index.h"

namespace kvtier::tiers {

class EntryPool {
 public:
  EntryPool() = default;
  EntryPool(const EntryPool&) = delete;
  EntryPool& operator=(const EntryPool&) = delete;
  ~EntryPool();  // every entry must have been given back (or be dead)

  // A new entry for (key, parent), other fields at their defaults.
  // Thread-safe; aborts only when the system is out of address space.
  PageEntry* New(const PageKey& key, const PageKey& parent) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back an entry from New. Thread-safe.
  void Delete(PageEntry* e) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kChunkBytes = 2 << 20;  // one huge page (huge_pages.h)
  static constexpr size_t kPerChunk = kChunkBytes / sizeof(PageEntry);
  static_assert(sizeof(PageEntry) % 64 == 0, "blocks are whole cache lines (page_index.h)");
  // A freed block holds the next free one.
  union Block {
    Block* next_free;
    alignas(PageEntry) unsigned char bytes[sizeof(PageEntry)];
  };
  static Block* MapChunk();
  Block* Take() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::vector<Block*> chunks_ ABSL_GUARDED_BY(mu_);
  size_t used_in_last_ ABSL_GUARDED_BY(mu_) = kPerChunk;  // blocks of the last chunk handed out
  Block* free_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace kvtier::tiers
