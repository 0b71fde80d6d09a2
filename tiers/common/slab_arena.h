// SlabArena: the allocator behind a tier's byte space. The space is carved
// into equal slabs; a slab is given to one slot size (a "class") when first
// needed and goes back to the free pool once its last slot is freed, so a
// change of page size across sessions does not strand memory forever.
// Metadata lives outside the arena, so it works for non-addressable tiers too.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

class SlabArena {
 public:
  // Slot sizes are rounded up to this, so every slot starts cache-line aligned.
  static constexpr uint64_t kSlotAlign = 64;

  // `capacity` is rounded down to whole slabs. Both must be > 0 and
  // slab_bytes a multiple of kSlotAlign (checked by Create).
  static absl::StatusOr<std::unique_ptr<SlabArena>> Create(uint64_t capacity, uint64_t slab_bytes);

  // A slot of at least `bytes`. InvalidArgument when bytes is 0 or larger
  // than a slab; ResourceExhausted when no slot of that class and no empty
  // slab are left. Thread-safe.
  absl::StatusOr<Slot> Allocate(uint64_t bytes);
  // Returns a slot from Allocate; a slot that does not belong to this arena
  // is ignored (and counted in bad_frees()). Thread-safe.
  void Free(const Slot& slot);

  // Recovery: marks `claims` (slots recorded before a restart) as allocated
  // in an arena that has handed out nothing yet, filling in each Slot's cls. A claim is rejected (false
  // in the result) when it lies outside the arena, is misaligned for its
  // size, overlaps an earlier claim, or its slab already serves another size.
  std::vector<bool> Restore(std::vector<Slot>& claims);

  uint64_t capacity() const { return slab_bytes_ * num_slabs_; }
  uint64_t slab_bytes() const { return slab_bytes_; }
  // Bytes of slots handed out (slot granularity). Thread-safe.
  uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  uint32_t free_slabs() const;
  uint64_t bad_frees() const;

  static uint64_t RoundToSlot(uint64_t bytes) {
    return (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Slab {
    uint32_t cls = kNone;
    uint32_t used = 0;             // slots handed out
    uint32_t bump = 0;             // slots never handed out start here
    uint32_t partial_pos = kNone;  // index in its class's partial list
    std::vector<uint32_t> freed;   // slot indices freed since assignment
  };
  struct SizeClass {
    uint64_t slot_bytes = 0;
    uint32_t slots_per_slab = 0;
    std::vector<uint32_t> partial;  // slabs of this class with a free slot
  };

  SlabArena(uint64_t slab_bytes, uint32_t num_slabs);
  uint32_t ClassFor(uint64_t slot_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AssignSlab(uint32_t cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddPartial(uint32_t slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemovePartial(uint32_t slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlab(uint32_t slab) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t slab_bytes_;
  const uint32_t num_slabs_;
  mutable absl::Mutex mu_;
  std::vector<Slab> slabs_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slabs_ ABSL_GUARDED_BY(mu_);
  std::vector<SizeClass> classes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> class_by_size_ ABSL_GUARDED_BY(mu_);
  // Written under mu_, read lock-free by watermark checks.
  std::atomic<uint64_t> used_bytes_{0};
  uint64_t bad_frees_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::tiers
