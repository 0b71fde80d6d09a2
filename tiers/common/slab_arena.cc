// SlabArena: slab assignment, per-class partial lists and slot recycling.
// Freed slots are reused before untouched ones so a lightly used arena keeps
// touching the same memory.
#include "tiers/common/slab_arena.h"

#include "absl/strings/str_cat.h"

namespace kvtier::tiers {

absl::StatusOr<std::unique_ptr<SlabArena>> SlabArena::Create(uint64_t capacity,
                                                             uint64_t slab_bytes) {
  if (slab_bytes == 0 || slab_bytes % kSlotAlign != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slab_bytes ", slab_bytes, " must be a non-zero multiple of ", kSlotAlign));
  }
  if (capacity < slab_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity ", capacity, " is smaller than one slab (", slab_bytes, ")"));
  }
  uint64_t slabs = capacity / slab_bytes;
  if (slabs >= kNone) return absl::InvalidArgumentError("too many slabs; use larger slabs");
  return std::unique_ptr<SlabArena>(new SlabArena(slab_bytes, static_cast<uint32_t>(slabs)));
}

SlabArena::SlabArena(uint64_t slab_bytes, uint32_t num_slabs)
    : slab_bytes_(slab_bytes), num_slabs_(num_slabs), slabs_(num_slabs) {
  free_slabs_.reserve(num_slabs);
  // Hand out low slabs first: pop_back takes the last element.
  for (uint32_t i = num_slabs; i > 0; --i) free_slabs_.push_back(i - 1);
}

absl::StatusOr<Slot> SlabArena::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > slab_bytes_ || bytes > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate ", bytes, " bytes from slabs of ", slab_bytes_));
  }
  const uint64_t slot_bytes = RoundToSlot(bytes);
  absl::MutexLock lock(&mu_);
  const uint32_t cls = ClassFor(slot_bytes);
  if (classes_[cls].partial.empty() && !AssignSlab(cls)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free slot of ", slot_bytes, " bytes and no free slab"));
  }
  SizeClass& c = classes_[cls];
  const uint32_t slab_idx = c.partial.back();
  Slab& slab = slabs_[slab_idx];
  uint32_t slot_idx;
  if (!slab.freed.empty()) {
    slot_idx = slab.freed.back();
    slab.freed.pop_back();
  } else {
    slot_idx = slab.bump++;
  }
  if (++slab.used == c.slots_per_slab) RemovePartial(slab_idx);
  used_bytes_.fetch_add(slot_bytes, std::memory_order_relaxed);
  return Slot{slab_idx * slab_bytes_ + slot_idx * c.slot_bytes, static_cast<uint32_t>(bytes), cls};
}

void SlabArena::Free(const Slot& slot) {
  absl::MutexLock lock(&mu_);
  const uint64_t slab_idx = slot.offset / slab_bytes_;
  if (slab_idx >= num_slabs_ || slabs_[slab_idx].cls != slot.cls || slot.cls >= classes_.size()) {
    ++bad_frees_;
    return;
  }
  Slab& slab = slabs_[slab_idx];
  const SizeClass& c = classes_[slot.cls];
  const uint64_t in_slab = slot.offset % slab_bytes_;
  if (in_slab % c.slot_bytes != 0 || in_slab / c.slot_bytes >= slab.bump || slab.used == 0) {
    ++bad_frees_;
    return;
  }
  used_bytes_.fetch_sub(c.slot_bytes, std::memory_order_relaxed);
  if (--slab.used == 0) {
    ReleaseSlab(static_cast<uint32_t>(slab_idx));
    return;
  }
  slab.freed.push_back(static_cast<uint32_t>(in_slab / c.slot_bytes));
  if (slab.partial_pos == kNone) AddPartial(static_cast<uint32_t>(slab_idx));
}

std::vector<bool> SlabArena::Restore(std::vector<Slot>& claims) {
  absl::MutexLock lock(&mu_);
  std::vector<bool> ok(claims.size(), false);
  std::vector<std::vector<bool>> taken(num_slabs_);  // slot bitmap per claimed slab
  for (size_t i = 0; i < claims.size(); ++i) {
    Slot& c = claims[i];
    const uint64_t slot_bytes = RoundToSlot(c.bytes);
    const uint64_t slab_idx = c.offset / slab_bytes_;
    if (c.bytes == 0 || slot_bytes > slab_bytes_ || slab_idx >= num_slabs_) continue;
    const uint32_t cls = ClassFor(slot_bytes);
    Slab& slab = slabs_[slab_idx];
    const uint64_t in_slab = c.offset % slab_bytes_;
    if (in_slab % slot_bytes != 0 || in_slab / slot_bytes >= classes_[cls].slots_per_slab) continue;
    if (slab.cls != kNone && slab.cls != cls) continue;
    if (slab.cls == kNone) {
      slab.cls = cls;
      taken[slab_idx].assign(classes_[cls].slots_per_slab, false);
    }
    const uint32_t idx = static_cast<uint32_t>(in_slab / slot_bytes);
    if (taken[slab_idx][idx]) continue;
    taken[slab_idx][idx] = true;
    c.cls = cls;
    ok[i] = true;
  }
  // Rebuild the free structures from the bitmaps.
  free_slabs_.clear();
  for (uint32_t s = num_slabs_; s > 0; --s) {
    const uint32_t slab_idx = s - 1;
    Slab& slab = slabs_[slab_idx];
    if (slab.cls == kNone) {
      free_slabs_.push_back(slab_idx);
      continue;
    }
    const SizeClass& c = classes_[slab.cls];
    slab.bump = c.slots_per_slab;
    slab.used = 0;
    slab.freed.clear();
    for (uint32_t j = c.slots_per_slab; j > 0; --j) {
      if (taken[slab_idx][j - 1]) ++slab.used;
      else slab.freed.push_back(j - 1);
    }
    used_bytes_.fetch_add(slab.used * c.slot_bytes, std::memory_order_relaxed);
    if (slab.used == 0) ReleaseSlab(slab_idx);
    else if (slab.used < c.slots_per_slab) AddPartial(slab_idx);
  }
  return ok;
}

uint32_t SlabArena::free_slabs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(free_slabs_.size());
}

uint64_t SlabArena::bad_frees() const {
  absl::MutexLock lock(&mu_);
  return bad_frees_;
}

uint32_t SlabArena::ClassFor(uint64_t slot_bytes) {
  auto [it, inserted] = class_by_size_.try_emplace(slot_bytes, classes_.size());
  if (inserted) {
    SizeClass c;
    c.slot_bytes = slot_bytes;
    c.slots_per_slab = static_cast<uint32_t>(slab_bytes_ / slot_bytes);
    classes_.push_back(std::move(c));
  }
  return it->second;
}

bool SlabArena::AssignSlab(uint32_t cls) {
  if (free_slabs_.empty()) return false;
  const uint32_t slab_idx = free_slabs_.back();
  free_slabs_.pop_back();
  Slab& slab = slabs_[slab_idx];
  slab.cls = cls;
  slab.used = 0;
  slab.bump = 0;
  AddPartial(slab_idx);
  return true;
}

void SlabArena::AddPartial(uint32_t slab_idx) {
  auto& partial = classes_[slabs_[slab_idx].cls].partial;
  slabs_[slab_idx].partial_pos = static_cast<uint32_t>(partial.size());
  partial.push_back(slab_idx);
}

void SlabArena::RemovePartial(uint32_t slab_idx) {
  auto& partial = classes_[slabs_[slab_idx].cls].partial;
  const uint32_t pos = slabs_[slab_idx].partial_pos;
  // Swap-remove keeps removal O(1); partial-list order does not matter.
  partial[pos] = partial.back();
  slabs_[partial[pos]].partial_pos = pos;
  partial.pop_back();
  slabs_[slab_idx].partial_pos = kNone;
}

void SlabArena::ReleaseSlab(uint32_t slab_idx) {
  if (slabs_[slab_idx].partial_pos != kNone) RemovePartial(slab_idx);
  Slab& slab = slabs_[slab_idx];
  slab.cls = kNone;
  slab.bump = 0;
  // The free list can be large for small slots; give its memory back.
  std::vector<uint32_t>().swap(slab.freed);
  free_slabs_.push_back(slab_idx);
}

}  // namespace kvtier::tiers
