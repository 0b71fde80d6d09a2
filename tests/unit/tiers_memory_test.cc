// The index's memory (tiers/store/internal/entry_pool.h, tiers/common/huge_pages.h): entries come
// from line-aligned pool blocks that are reused once freed, huge mappings are
// 2 MiB-aligned and zero-filled, and a hash table whose arrays cross to
// huge mappings as it grows keeps every key.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/common/huge_pages.h"
#include "tiers/store/internal/entry_pool.h"

namespace kvtier::tiers {
namespace {

using testing::Key;

TEST(EntryPoolTest, EntriesAreFreshAlignedAndReused) {
  EntryPool pool;
  std::vector<PageEntry*> entries;
  for (uint64_t k = 0; k < 40000; ++k) {  // more than one chunk
    PageEntry* e = pool.New(Key(k), Key(k + 1));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
    EXPECT_EQ(e->key, Key(k));
    EXPECT_EQ(e->parent, Key(k + 1));
    EXPECT_EQ(e->pins, 0u);
    EXPECT_EQ(e->stamp, 0u);
    EXPECT_EQ(e->ns_links.prev, nullptr);
    entries.push_back(e);
  }
  entries[7]->pins = 3;  // dirty a block, give it back: it comes back clean
  PageEntry* freed = entries[7];
  pool.Delete(freed);
  PageEntry* again = pool.New(Key(1), PageKey::Zero());
  if (again == freed) EXPECT_EQ(again->pins, 0u);
  EXPECT_EQ(again->key, Key(1));
  entries[7] = again;
  for (PageEntry* e : entries) pool.Delete(e);
}

TEST(HugePagesTest, MappingsAreAlignedAndZeroed) {
  for (size_t bytes : {size_t{1}, kHugePageBytes, 3 * kHugePageBytes + 5}) {
    auto* p = static_cast<uint8_t*>(MapHuge(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[bytes - 1], 0);
    std::memset(p, 0xab, bytes);  // writable to the last byte
    UnmapHuge(p, bytes);
  }
}

TEST(HugePagesTest, HashSetKeepsEveryKeyAcrossHugeTables) {
  absl::flat_hash_set<uint64_t, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                      HugePageAllocator<uint64_t>>
      set;
  constexpr uint64_t kKeys = 1'000'000;  // its arrays pass kMinBytes while it grows
  for (uint64_t k = 0; k < kKeys; ++k) set.insert(k * 0x9E3779B97F4A7C15ull);
  EXPECT_EQ(set.size(), kKeys);
  for (uint64_t k = 0; k < kKeys; k += 997) EXPECT_TRUE(set.contains(k * 0x9E3779B97F4A7C15ull));
  EXPECT_FALSE(set.contains(1));
  set.clear();
  set.rehash(0);  // gives the huge arrays back
  EXPECT_TRUE(set.empty());
}

}  // namespace
}  // namespace kvtier::tiers
