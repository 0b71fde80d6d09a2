// PointerTable (the index shard's table) against a reference set: random
// inserts, erases and finds, with well-mixed hashes and with hashes that
// collide on purpose (long overflow runs, saturated counts, wrap-around).
#include "tiers/store/internal/pointer_table.h"

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"

namespace kvtier::tiers {
namespace {

struct Item {
  uint64_t key;
};

// `Bits` 64: absl's hash; fewer: every key lands in one of 2^Bits hash
// values (home bucket and tag alike), so runs of full buckets form at once.
template <int Bits>
struct ItemHash {
  uint64_t operator()(uint64_t k) const {
    const uint64_t h = absl::HashOf(k);
    return Bits >= 64 ? h : h & ((uint64_t{1} << Bits) - 1);
  }
  uint64_t operator()(const Item* e) const { return (*this)(e->key); }
};
struct ItemEq {
  bool operator()(const Item* e, uint64_t k) const { return e->key == k; }
};

template <int Bits>
void RandomOps(uint64_t seed, int ops, uint64_t key_space) {
  PointerTable<Item, ItemHash<Bits>, ItemEq> table;
  std::unordered_map<uint64_t, std::unique_ptr<Item>> ref;
  std::mt19937_64 rng(seed);
  for (int op = 0; op < ops; ++op) {
    const uint64_t k = rng() % key_space;
    const int what = int(rng() % 3);
    auto it = ref.find(k);
    if (what == 0 && it == ref.end()) {
      auto item = std::make_unique<Item>(Item{k});
      table.Insert(item.get());
      ref.emplace(k, std::move(item));
    } else if (what == 1 && it != ref.end()) {
      ASSERT_TRUE(table.Erase(it->second.get())) << "op " << op << " key " << k;
      ref.erase(it);
    } else {
      Item* found = table.Find(k);
      ASSERT_EQ(found, it == ref.end() ? nullptr : it->second.get()) << "op " << op << " key " << k;
    }
    ASSERT_EQ(table.size(), ref.size());
  }
  for (const auto& [k, item] : ref) ASSERT_EQ(table.Find(k), item.get()) << k;
  size_t seen = 0;
  table.ForEach([&](Item* e) {
    ++seen;
    EXPECT_EQ(ref.at(e->key).get(), e);
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(PointerTableTest, MatchesAReferenceSet) { RandomOps<64>(1, 200000, 5000); }

TEST(PointerTableTest, GrowsThroughManyDoublings) {
  PointerTable<Item, ItemHash<64>, ItemEq> table;
  std::vector<Item> items(300000);
  for (uint64_t i = 0; i < items.size(); ++i) {
    items[i].key = i * 7919;
    table.Insert(&items[i]);
  }
  EXPECT_EQ(table.size(), items.size());
  // Filled to at most 4/5 of its slots (7 a bucket).
  EXPECT_GE(table.bucket_count() * 7 * 4 / 5, items.size());
  for (const Item& it : items) ASSERT_EQ(table.Find(it.key), &it);
  EXPECT_EQ(table.Find(uint64_t{1}), nullptr);
  for (size_t i = 0; i < items.size(); i += 2) ASSERT_TRUE(table.Erase(&items[i]));
  for (size_t i = 0; i < items.size(); ++i)
    ASSERT_EQ(table.Find(items[i].key), i % 2 ? &items[i] : nullptr) << i;
}

// 16 hash values for thousands of keys: every probe walks a run of full
// buckets, overflow counts saturate, runs wrap past the last bucket, and
// equal tags make Find compare keys.
TEST(PointerTableTest, CollidingHashes) { RandomOps<4>(2, 60000, 3000); }

TEST(PointerTableTest, EraseOfAnAbsentEntryAndClear) {
  PointerTable<Item, ItemHash<64>, ItemEq> table;
  Item a{1}, b{2};
  EXPECT_FALSE(table.Erase(&a));
  EXPECT_EQ(table.Find(uint64_t{1}), nullptr);
  table.Insert(&a);
  EXPECT_FALSE(table.Erase(&b));
  Item a2{1};  // an equal key, another entry: erase goes by identity
  EXPECT_FALSE(table.Erase(&a2));
  EXPECT_EQ(table.Find(uint64_t{1}), &a);
  table.Clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.Find(uint64_t{1}), nullptr);
  table.Insert(&b);
  EXPECT_EQ(table.Find(uint64_t{2}), &b);
}

}  // namespace
}  // namespace kvtier::tiers
