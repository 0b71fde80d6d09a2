// PointerTable: the index shard's hash set of entry pointers, laid out so a
// probe reads one cache line. absl::flat_hash_set keeps its control bytes
// and its slots in two arrays, so a probe at 10M pages was two table misses
// (control group, then slot) before the entry's own. Here a 64-byte bucket
// holds seven pointers and their seven one-byte tags, so a probe is one
// table line, then the entry (F14's chunk, sized to a line:
// folly/container/detail/F14Table.h). Measured against absl's table:
// LOOKUP 5-8% faster at 1M and 10M pages, eviction 1.25x, 3 B less a page
// (docs/BENCHMARKS.md, issue 28).
//
// Open addressing over buckets with linear probing. Each bucket counts the
// entries that were placed past it because it was full (saturating at 255):
// a probe stops at the first bucket whose count is 0, so a lookup of an
// absent key usually reads one line, and erasing needs no tombstones.
// Not thread-safe: the shard's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tiers/common/huge_pages.h"

namespace kvtier::tiers {

// `Hash` hashes a T* and every key type K that Find takes; `Eq(const T*,
// const K&)` compares. Hashes are 64-bit and well mixed (absl::Hash): the
// low bits pick the bucket, the top seven the tag.
template <typename T, typename Hash, typename Eq>
class PointerTable {
 public:
  PointerTable() = default;
  ~PointerTable() { Free(buckets_, mask_ + 1); }
  PointerTable(const PointerTable&) = delete;
  PointerTable& operator=(const PointerTable&) = delete;

  size_t size() const { return size_; }
  size_t bucket_count() const { return buckets_ == nullptr ? 0 : mask_ + 1; }

  // The entry equal to `k`, or nullptr.
  template <typename K>
  T* Find(const K& k) const {
    return Find(k, Hash()(k));
  }
  // Find with `h` == Hash()(k), computed once by a caller that also
  // prefetches (Prefetch below).
  template <typename K>
  T* Find(const K& k, uint64_t h) const {
    if (size_ == 0) return nullptr;
    const uint64_t tags = kLowBytes * Tag(h);
    size_t b = h & mask_;
    for (size_t probed = 0; probed <= mask_; ++probed, b = (b + 1) & mask_) {
      const Bucket& bk = buckets_[b];
      for (uint64_t m = ZeroBytes(bk.meta ^ tags); m != 0; m &= m - 1) {
        T* e = bk.slot[__builtin_ctzll(m) >> 3];
        if (e != nullptr && Eq()(e, k)) return e;
      }
      if (Overflow(bk.meta) == 0) return nullptr;
    }
    return nullptr;
  }

  // Starts loading the bucket that Find(k, h) reads first.
  void Prefetch(uint64_t h) const {
    if (buckets_ != nullptr) __builtin_prefetch(&buckets_[h & mask_]);
  }

  // Adds `e`, whose key must be absent. May grow the table (rehashing every
  // entry) and throw std::bad_alloc as a standard container does.
  void Insert(T* e) {
    if (size_ >= max_size_) Grow();
    Place(e, Hash()(e));
    ++size_;
  }

  // Removes `e` (by identity); false when it is not in the table.
  bool Erase(const T* e) {
    if (size_ == 0) return false;
    const uint64_t h = Hash()(e);
    const size_t home = h & mask_;
    size_t b = home;
    for (size_t probed = 0; probed <= mask_; ++probed, b = (b + 1) & mask_) {
      Bucket& bk = buckets_[b];
      for (int i = 0; i < kSlots; ++i) {
        if (bk.slot[i] != e) continue;
        bk.slot[i] = nullptr;
        bk.meta &= ~(uint64_t{0xff} << (8 * i));
        for (size_t p = home; p != b; p = (p + 1) & mask_) DropOverflow(buckets_[p]);
        --size_;
        return true;
      }
      if (Overflow(bk.meta) == 0) return false;
    }
    return false;
  }

  // Calls f(T*) for every entry, in no particular order.
  template <typename F>
  void ForEach(F f) const {
    for (size_t b = 0; b < bucket_count(); ++b)
      for (T* e : buckets_[b].slot)
        if (e != nullptr) f(e);
  }

  // Forgets every entry and frees the buckets.
  void Clear() {
    Free(buckets_, mask_ + 1);
    buckets_ = nullptr;
    mask_ = 0;
    size_ = max_size_ = 0;
  }

 private:
  static constexpr int kSlots = 7;
  // One line: byte i of `meta` (i < 7) is slot i's tag (0: empty, else
  // 0x80 | the hash's top seven bits); byte 7 is the overflow count.
  struct alignas(64) Bucket {
    uint64_t meta;
    T* slot[kSlots];
  };
  static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");
  static constexpr uint64_t kLowBytes = 0x0001010101010101;   // the tag bytes' low bits
  static constexpr uint64_t kHighBytes = 0x0080808080808080;  // and high bits
  // Filled to 4/5 of its slots before it doubles: probes past the home
  // bucket stay rare (F14 fills 12 of 14).
  static constexpr size_t kMaxLoadNum = 4, kMaxLoadDen = 5;

  static uint64_t Tag(uint64_t h) { return (h >> 57) | 0x80; }
  static uint32_t Overflow(uint64_t meta) { return uint32_t(meta >> 56); }
  // The high bit of each tag byte of x that is zero. Bytes above a zero byte
  // may be flagged falsely (borrows): callers check the slot, never trust
  // the flag alone.
  static uint64_t ZeroBytes(uint64_t x) { return (x - kLowBytes) & ~x & kHighBytes; }
  static void AddOverflow(Bucket& bk) {
    if (Overflow(bk.meta) != 0xff) bk.meta += uint64_t{1} << 56;
  }
  // A saturated count stays (entries past it are no longer counted).
  static void DropOverflow(Bucket& bk) {
    const uint32_t o = Overflow(bk.meta);
    if (o != 0 && o != 0xff) bk.meta -= uint64_t{1} << 56;
  }

  // Puts e in the first bucket with a free slot from its home on, counting
  // it in every full bucket it passes. The table has room (Insert grows it
  // first).
  void Place(T* e, uint64_t h) {
    size_t b = h & mask_;
    while (true) {
      Bucket& bk = buckets_[b];
      const uint64_t empty = ~bk.meta & kHighBytes;
      if (empty != 0) {
        const int i = __builtin_ctzll(empty) >> 3;
        bk.slot[i] = e;
        bk.meta |= Tag(h) << (8 * i);
        return;
      }
      AddOverflow(bk);
      b = (b + 1) & mask_;
    }
  }

  void Grow() {
    const size_t old_count = bucket_count();
    const size_t count = old_count == 0 ? 8 : old_count * 2;
    Bucket* old = buckets_;
    buckets_ = Allocate(count);
    mask_ = count - 1;
    max_size_ = count * kSlots * kMaxLoadNum / kMaxLoadDen;
    for (size_t b = 0; b < old_count; ++b)
      for (T* e : old[b].slot)
        if (e != nullptr) Place(e, Hash()(e));
    Free(old, old_count);
  }

  // Zeroed buckets: large tables on huge pages (MapHuge memory is zero).
  static Bucket* Allocate(size_t count) {
    Bucket* p = HugePageAllocator<Bucket>().allocate(count);
    if (count * sizeof(Bucket) < HugePageAllocator<Bucket>::kMinBytes)
      std::memset(static_cast<void*>(p), 0, count * sizeof(Bucket));
    return p;
  }
  static void Free(Bucket* p, size_t count) {
    if (p != nullptr) HugePageAllocator<Bucket>().deallocate(p, count);
  }

  Bucket* buckets_ = nullptr;
  size_t mask_ = 0;  // bucket_count() - 1 (a power of two)
  size_t size_ = 0;
  size_t max_size_ = 0;  // size_ at which Insert doubles the table
};

}  // namespace kvtier::tiers
