// The remote tier against a real loopback cluster (one for the binary):
// record round trips, a corrupt or foreign value is a miss plus a counter
// and never wrong bytes, Unpersist deletes only its own copy; and with no
// cluster at all, the tier is down and every read a miss.
#include "tiers/remote/remote_tier.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/remote/cluster_fixture.h"
#include "tests/remote/remote_test_env.h"
#include "tiers/remote/remote_record.h"

namespace kvtier::tiers::remote {
namespace {

constexpr uint64_t kPage = 256 << 10;

PageKey Key(uint64_t i) { return testing::TestKey(i, 0x5a); }

std::vector<uint8_t> Page(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class RemoteTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(testing::SharedCluster(), nullptr);
    RemoteTierConfig c;
    c.cluster = testing::SharedCluster()->Config();
    c.capacity_bytes = 64 * kPage;
    auto tier = CreateRemoteTier(c);
    ASSERT_TRUE(tier.ok()) << tier.status();
    tier_ = *std::move(tier);
    auto raw = RedisCluster::Create(c.cluster);
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = *std::move(raw);
  }
  // Allocates, writes and stores one page of `ns`; returns its slot.
  Slot Store(const std::string& ns, const PageKey& key, const std::vector<uint8_t>& bytes) {
    auto slot = tier_->Allocate(bytes.size());
    EXPECT_TRUE(slot.ok()) << slot.status();
    EXPECT_TRUE(tier_->Write(*slot, 0, bytes.data(), bytes.size()).ok());
    PageMeta meta{.ns_name = ns, .key = key};
    std::vector<bool> written;
    EXPECT_TRUE(tier_->PersistBatch({*slot}, {meta}, &written).ok());
    EXPECT_EQ(written, std::vector<bool>{true});
    return *slot;
  }
  std::string RawGet(const std::string& key) {
    auto got = raw_->MultiGet(absl::MakeConstSpan(&key, 1));
    EXPECT_TRUE(got[0].ok() && got[0]->has_value());
    return got[0].ok() && got[0]->has_value() ? **got[0] : std::string();
  }
  void RawSet(const std::string& key, const std::string& value) {
    KeyValue kv{key, value};
    ASSERT_TRUE(raw_->MultiSet(absl::MakeConstSpan(&kv, 1))[0].ok());
  }
  std::unique_ptr<Tier> tier_;
  std::unique_ptr<RedisCluster> raw_;
};

TEST_F(RemoteTierTest, BatchRoundTripIsByteExactAndSelfDescribing) {
  std::vector<Slot> slots;
  std::vector<PageMeta> metas;
  std::vector<std::vector<uint8_t>> pages;
  for (uint32_t i = 0; i < 8; ++i) {
    pages.push_back(Page(kPage - 3 * i, i));  // odd sizes too
    auto slot = tier_->Allocate(pages.back().size());
    ASSERT_TRUE(slot.ok());
    // Written in two pieces, as a copy between two non-addressable tiers does.
    const uint64_t half = pages.back().size() / 2;
    ASSERT_TRUE(tier_->Write(*slot, 0, pages.back().data(), half).ok());
    ASSERT_TRUE(tier_->Write(*slot, half, pages.back().data() + half,
                             pages.back().size() - half).ok());
    slots.push_back(*slot);
    metas.push_back(PageMeta{.ns_name = "rt-a", .key = Key(100 + i), .parent = Key(99 + i)});
  }
  std::vector<bool> written;
  ASSERT_TRUE(tier_->PersistBatch(slots, metas, &written).ok());
  EXPECT_EQ(written, std::vector<bool>(8, true));
  for (uint32_t i = 0; i < 8; ++i) {
    std::vector<uint8_t> got(pages[i].size());
    ASSERT_TRUE(tier_->Read(slots[i], 0, got.data(), got.size()).ok());
    EXPECT_EQ(got, pages[i]);
    std::vector<uint8_t> part(4096);
    ASSERT_TRUE(tier_->Read(slots[i], 8192, part.data(), part.size()).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), pages[i].begin() + 8192));
    // The value names its page: namespace, key, parent, size, checksum.
    const std::string value = RawGet(RecordKey("rt-a", Key(100 + i)));
    auto rec = ParseRecord(value);
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(rec->info.ns, "rt-a");
    EXPECT_EQ(rec->info.key, Key(100 + i));
    EXPECT_EQ(rec->info.parent, Key(99 + i));
    EXPECT_EQ(rec->body.size(), pages[i].size());
  }
  TierCounters c = tier_->counters();
  EXPECT_EQ(c.down, 0u);
  EXPECT_EQ(c.corrupt_reads, 0u);
  EXPECT_EQ(tier_->used_bytes(), [&] {
    uint64_t n = 0;
    for (auto& p : pages) n += p.size();
    return n;
  }());
}

TEST_F(RemoteTierTest, CorruptValueIsAMissAndACounterNeverWrongBytes) {
  const std::vector<uint8_t> page = Page(kPage, 7);
  const Slot slot = Store("rt-b", Key(1), page);
  std::string value = RawGet(RecordKey("rt-b", Key(1)));
  value[value.size() - 100] ^= 0x01;  // one bit of the body
  RawSet(RecordKey("rt-b", Key(1)), value);
  std::vector<uint8_t> got(kPage, 0xee);
  absl::Status st = tier_->Read(slot, 0, got.data(), got.size());
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_EQ(got, std::vector<uint8_t>(kPage, 0xee));  // nothing copied
  EXPECT_EQ(tier_->counters().corrupt_reads, 1u);
  // Known bad: the next read misses without asking the cluster again.
  EXPECT_TRUE(absl::IsDataLoss(tier_->Read(slot, 0, got.data(), got.size())));
  EXPECT_EQ(tier_->counters().corrupt_reads, 1u);
}

TEST_F(RemoteTierTest, AnotherNamespacesValueIsNeverServed) {
  EXPECT_NE(RecordKey("rt-c", Key(5)), RecordKey("rt-d", Key(5)));
  const std::vector<uint8_t> mine = Page(kPage, 1), theirs = Page(kPage, 2);
  Store("rt-c", Key(5), theirs);
  const Slot slot = Store("rt-d", Key(5), mine);
  // rt-c's intact record planted under rt-d's name: valid checksum, wrong tenant.
  RawSet(RecordKey("rt-d", Key(5)), RawGet(RecordKey("rt-c", Key(5))));
  std::vector<uint8_t> got(kPage, 0);
  EXPECT_TRUE(absl::IsDataLoss(tier_->Read(slot, 0, got.data(), got.size())));
  EXPECT_NE(got, theirs);
  EXPECT_EQ(tier_->counters().corrupt_reads, 1u);
}

TEST_F(RemoteTierTest, ValueGoneIsAMiss) {
  const Slot slot = Store("rt-e", Key(9), Page(kPage, 9));
  const std::string key = RecordKey("rt-e", Key(9));
  ASSERT_TRUE(raw_->MultiDelete(absl::MakeConstSpan(&key, 1))[0].ok());
  std::vector<uint8_t> got(kPage);
  EXPECT_TRUE(absl::IsDataLoss(tier_->Read(slot, 0, got.data(), got.size())));
  EXPECT_EQ(tier_->counters().missing_reads, 1u);
}

TEST_F(RemoteTierTest, UnpersistDeletesOnlyItsOwnCopy) {
  const Slot old_slot = Store("rt-f", Key(3), Page(kPage, 3));
  const Slot new_slot = Store("rt-f", Key(3), Page(kPage, 4));  // a newer copy of the key
  const std::string key = RecordKey("rt-f", Key(3));
  tier_->Unpersist(old_slot, PageMeta{.ns_name = "rt-f", .key = Key(3)});
  tier_->Free(old_slot);
  EXPECT_TRUE(*raw_->MultiExists(absl::MakeConstSpan(&key, 1))[0]);
  tier_->Unpersist(new_slot, PageMeta{.ns_name = "rt-f", .key = Key(3)});
  tier_->Free(new_slot);
  EXPECT_FALSE(*raw_->MultiExists(absl::MakeConstSpan(&key, 1))[0]);
  EXPECT_EQ(tier_->used_bytes(), 0u);
}

TEST(RemoteTierDownTest, NoClusterMeansDownAndMissesNeverErrors) {
  RemoteTierConfig c;
  c.cluster.seeds = {"127.0.0.1:1"};  // nothing listens there
  c.cluster.connect_timeout = absl::Milliseconds(100);
  c.min_backoff = absl::Milliseconds(50);
  auto tier = CreateRemoteTier(c);
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto slot = (*tier)->Allocate(4096);
  ASSERT_TRUE(slot.ok());
  std::vector<uint8_t> page(4096, 1);
  ASSERT_TRUE((*tier)->Write(*slot, 0, page.data(), page.size()).ok());
  std::vector<bool> written;
  EXPECT_FALSE((*tier)->PersistBatch({*slot}, {PageMeta{.ns_name = "x", .key = Key(1)}}, &written)
                   .ok());
  EXPECT_EQ(written, std::vector<bool>{false});
  TierCounters counters = (*tier)->counters();
  EXPECT_EQ(counters.down, 1u);
  EXPECT_EQ(counters.down_events, 1u);
  // Unstored staged bytes still read back (a move in progress).
  std::vector<uint8_t> got(4096);
  EXPECT_TRUE((*tier)->Read(*slot, 0, got.data(), got.size()).ok());
  EXPECT_EQ(got, page);
  (*tier)->Free(*slot);
}

TEST(RemoteRecordTest, TruncatedOrForeignValuesAreDataLoss) {
  const std::string body = "0123456789";
  RecordInfo info{.ns = "n", .key = Key(1)};
  info.checksum = 0;
  std::string value = EncodeHeader(info, body.size()) + body;
  EXPECT_TRUE(absl::IsDataLoss(ParseRecord(value).status()));  // checksum 0 is wrong
  EXPECT_TRUE(absl::IsDataLoss(ParseRecord("short").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseRecord(std::string(200, 'x')).status()));
}

TEST(RemoteRecordTest, KeysOfOneNamespaceSpreadOverSlots) {
  std::set<std::string> tags;
  for (uint64_t i = 0; i < 256; ++i) {
    const std::string k = RecordKey("tenant", Key(i));
    tags.insert(k.substr(k.find('{'), 6));
  }
  EXPECT_GT(tags.size(), 200u);
}

}  // namespace
}  // namespace kvtier::tiers::remote
