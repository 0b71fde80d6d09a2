// TierManager unit tests: dedup, LOOKUP counting, pins and delete, quotas,
// reservations, checksums, configuration and snapshots.
#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Bytes;
using testing::Has;
using testing::Key;
using testing::MakeManager;
using testing::Put;

constexpr uint64_t kPage = 4096;

NamespaceSnapshot NsSnap(const TierManager& m, NamespaceId id) {
  for (auto& ns : m.Snapshot().namespaces) {
    if (ns.id == id) return ns;
  }
  ADD_FAILURE() << "no namespace " << id;
  return {};
}

TEST(TierManagerTest, PresentKeyIsDeduplicated) {
  auto m = MakeManager({8}, kPage);
  NamespaceId a = AddNs(*m, "a");
  NamespaceId b = AddNs(*m, "b");
  EXPECT_EQ(*m->AddNamespace({"a", {}}), a);  // idempotent by name
  EXPECT_EQ(*m->FindNamespace("b"), b);
  EXPECT_TRUE(absl::IsNotFound(m->FindNamespace("c").status()));
  ASSERT_TRUE(Put(*m, a, 1, kPage).ok());
  auto again = m->Reserve(a, Key(1), PageKey::Zero(), kPage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, PutOutcome::kDeduplicated);
  EXPECT_FALSE(again->reservation.valid());
  // Same key in another namespace is another page.
  auto other = m->Reserve(b, Key(1), PageKey::Zero(), kPage);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->outcome, PutOutcome::kReserved);
  EXPECT_EQ(NsSnap(*m, a).puts, 1u);
  EXPECT_EQ(NsSnap(*m, a).dedup_puts, 1u);
  EXPECT_EQ(m->Snapshot().tiers[0].pages, 1u);
}

// Regression (issue 11): two reservations of one key used to coexist, and
// on NVMe both wrote a record under the key; the loser's pointed at a slot
// it then freed. Now the key's in-flight claim makes the second a dedup.
TEST(TierManagerTest, SecondReservationOfAKeyInFlightIsADedup) {
  auto m = MakeManager({8}, kPage);
  NamespaceId a = AddNs(*m, "a");
  NamespaceId b = AddNs(*m, "b");
  auto r1 = m->Reserve(a, Key(5), PageKey::Zero(), kPage);
  auto r2 = m->Reserve(a, Key(5), PageKey::Zero(), kPage);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->outcome, PutOutcome::kReserved);
  EXPECT_EQ(r2->outcome, PutOutcome::kDeduplicated);
  EXPECT_FALSE(r2->reservation.valid());
  // The claim is per namespace.
  auto rb = m->Reserve(b, Key(5), PageKey::Zero(), kPage);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->outcome, PutOutcome::kReserved);
  rb->reservation = Reservation();  // abandoned: frees the slot and the claim
  auto rb2 = m->Reserve(b, Key(5), PageKey::Zero(), kPage);
  ASSERT_TRUE(rb2.ok());
  EXPECT_EQ(rb2->outcome, PutOutcome::kReserved);
  rb2->reservation = Reservation();
  std::vector<uint8_t> bytes(kPage, 7);
  ASSERT_TRUE(r1->reservation.Fill(bytes.data()).ok());
  EXPECT_TRUE(r1->reservation.Commit());
  EXPECT_EQ(m->Snapshot().tiers[0].used_bytes, kPage);
  EXPECT_EQ(NsSnap(*m, a).bytes, kPage);
  EXPECT_EQ(NsSnap(*m, a).dedup_puts, 1u);
  // Committed: the next PUT of the key is a dedup against the page.
  auto r3 = m->Reserve(a, Key(5), PageKey::Zero(), kPage);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->outcome, PutOutcome::kDeduplicated);
}

TEST(TierManagerTest, LookupCountsLeadingHitsOnly) {
  auto m = MakeManager({8}, kPage);
  NamespaceId a = AddNs(*m, "a");
  NamespaceId b = AddNs(*m, "b");
  for (uint64_t k : {1, 2, 4}) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  std::vector<PageKey> keys = {Key(1), Key(2), Key(3), Key(4)};
  LookupResult r = m->Lookup(a, keys);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.tiers, (std::vector<TierKind>{TierKind::kHost, TierKind::kHost}));
  EXPECT_EQ(m->Lookup(b, keys).hits, 0u);   // isolation: b cannot see a's pages
  EXPECT_EQ(m->Lookup(99, keys).hits, 0u);  // unknown namespace
  EXPECT_EQ(NsSnap(*m, a).lookup_hits, 2u);
  EXPECT_EQ(NsSnap(*m, a).lookup_misses, 2u);
  EXPECT_EQ(NsSnap(*m, b).lookup_misses, 4u);
}

TEST(TierManagerTest, PinnedPageSurvivesDeleteUntilUnpinned) {
  auto m = MakeManager({4}, kPage);
  NamespaceId a = AddNs(*m, "a");
  auto data = Bytes(kPage, 1);
  ASSERT_TRUE(Put(*m, a, Key(1), PageKey::Zero(), data).ok());
  auto pin = m->PinForRead(a, Key(1));
  ASSERT_TRUE(pin.has_value());
  EXPECT_FALSE(m->PinForRead(a, Key(2)).has_value());
  EXPECT_EQ(m->Snapshot().tiers[0].pinned_pages, 1u);
  EXPECT_EQ(m->Snapshot().tiers[0].hits, 1u);
  EXPECT_EQ(m->Snapshot().tiers[0].misses, 1u);
  EXPECT_EQ(NsSnap(*m, a).get_hits, 1u);
  EXPECT_EQ(NsSnap(*m, a).get_misses, 1u);
  EXPECT_EQ(m->EvictTo(0, 0), 0u);  // pinned: never evicted
  EXPECT_TRUE(m->Delete(a, Key(1)));
  EXPECT_FALSE(m->Delete(a, Key(1)));
  EXPECT_FALSE(Has(*m, a, 1));
  EXPECT_EQ(m->Snapshot().tiers[0].used_bytes, kPage);  // still readable
  EXPECT_EQ(std::memcmp(pin->data(), data.data(), kPage), 0);
  PagePin moved = std::move(*pin);
  EXPECT_FALSE(pin->valid());
  moved.Reset();
  EXPECT_EQ(m->Snapshot().tiers[0].used_bytes, 0u);
  EXPECT_EQ(m->Snapshot().tiers[0].pinned_pages, 0u);
  EXPECT_EQ(NsSnap(*m, a).bytes, 0u);
  EXPECT_EQ(NsSnap(*m, a).pages, 0u);
}

TEST(TierManagerTest, AbandonedReservationReturnsSlotAndQuota) {
  auto m = MakeManager({4}, kPage);
  NamespaceId a = AddNs(*m, "a", {{TierKind::kHost, 2 * kPage}});
  {
    auto r = m->Reserve(a, Key(1), PageKey::Zero(), kPage);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(NsSnap(*m, a).tier_bytes[TierKind::kHost], kPage);
    Reservation moved = std::move(r->reservation);
    EXPECT_EQ(m->Snapshot().tiers[0].used_bytes, kPage);
  }
  EXPECT_EQ(m->Snapshot().tiers[0].used_bytes, 0u);
  EXPECT_EQ(NsSnap(*m, a).bytes, 0u);
  EXPECT_FALSE(Has(*m, a, 1));
}

// RAM pages are copied once and carry no checksum yet: it is computed when a
// page is written to NVMe (nvme_tier_test checks it there).
TEST(TierManagerTest, RamPagesAreExactAndUnhashed) {
  auto m = MakeManager({4}, 256 << 10);
  NamespaceId a = AddNs(*m, "a");
  const uint64_t n = 200'003;  // not a multiple of the fill chunk
  auto data = Bytes(n, 3);
  ASSERT_TRUE(Put(*m, a, Key(1), PageKey::Zero(), data).ok());
  auto pin = m->PinForRead(a, Key(1));
  ASSERT_TRUE(pin.has_value());
  EXPECT_EQ(pin->bytes(), n);
  EXPECT_EQ(pin->checksum(), 0u);
  std::vector<uint8_t> out(n);
  ASSERT_TRUE(pin->CopyTo(out.data()).ok());
  EXPECT_EQ(out, data);
  // Written in place through data(), then committed.
  auto r = m->Reserve(a, Key(2), PageKey::Zero(), n);
  ASSERT_TRUE(r.ok());
  std::memcpy(r->reservation.data(), data.data(), n);
  ASSERT_TRUE(r->reservation.MarkFilled().ok());
  EXPECT_TRUE(r->reservation.Commit());
  auto pin2 = m->PinForRead(a, Key(2));
  ASSERT_TRUE(pin2.has_value());
  EXPECT_EQ(0, std::memcmp(pin2->data(), data.data(), n));
}

TEST(TierManagerTest, QuotaEvictsOwnPagesOnly) {
  auto m = MakeManager({16}, kPage);
  NamespaceId a = AddNs(*m, "a", {{TierKind::kHost, 4 * kPage}});
  NamespaceId b = AddNs(*m, "b");
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(*m, b, 100 + k, kPage).ok());
  for (uint64_t k = 0; k < 6; ++k) ASSERT_TRUE(Put(*m, a, k, kPage).ok());
  EXPECT_EQ(NsSnap(*m, a).pages, 4u);
  EXPECT_EQ(NsSnap(*m, a).tier_bytes[TierKind::kHost], 4 * kPage);
  EXPECT_EQ(NsSnap(*m, a).tier_quota_bytes[TierKind::kHost], 4 * kPage);
  EXPECT_EQ(NsSnap(*m, a).quota_evictions, 2u);
  EXPECT_EQ(NsSnap(*m, b).pages, 8u);
  EXPECT_FALSE(Has(*m, a, 0));  // a's oldest went
  EXPECT_FALSE(Has(*m, a, 1));
  EXPECT_TRUE(Has(*m, a, 5));
  // With all of a's pages pinned, a is refused, by name and reason.
  std::vector<PagePin> pins;
  for (uint64_t k = 2; k < 6; ++k) pins.push_back(*m->PinForRead(a, Key(k)));
  auto r = m->Reserve(a, Key(50), PageKey::Zero(), kPage);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("namespace 'a'"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("quota"), std::string::npos) << r.status();
  EXPECT_EQ(NsSnap(*m, b).pages, 8u);
}

TEST(TierManagerTest, FullTierOfPinnedPagesRefusesClearly) {
  auto m = MakeManager({4}, kPage);
  NamespaceId a = AddNs(*m, "a");
  NamespaceId b = AddNs(*m, "b");
  std::vector<PagePin> pins;
  for (uint64_t k = 0; k < 4; ++k) {
    ASSERT_TRUE(Put(*m, b, k, kPage).ok());
    pins.push_back(*m->PinForRead(b, Key(k)));
  }
  auto r = m->Reserve(a, Key(9), PageKey::Zero(), kPage);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("namespace 'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host"), std::string::npos) << msg;
  EXPECT_EQ(NsSnap(*m, b).pages, 4u);  // b's pinned pages untouched
  pins.pop_back();                     // one unpinned page of b may now go
  EXPECT_TRUE(Put(*m, a, 9, kPage).ok());
  EXPECT_TRUE(Has(*m, a, 9));
}

TEST(TierManagerTest, BadArgumentsAndConfig) {
  auto m = MakeManager({4}, kPage);
  NamespaceId a = AddNs(*m, "a");
  EXPECT_EQ(m->MaxPageBytes(), kPage);
  EXPECT_TRUE(absl::IsInvalidArgument(m->Reserve(a, Key(1), PageKey::Zero(), 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m->Reserve(a, Key(1), PageKey::Zero(), kPage + 1).status()));
  EXPECT_TRUE(absl::IsNotFound(m->Reserve(77, Key(1), PageKey::Zero(), kPage).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m->AddNamespace({"", {}}).status()));
  TierManagerConfig c;
  c.low_watermark = 0.9;
  c.high_watermark = 0.8;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Validate()));
  c = TierManagerConfig();
  c.high_watermark = 1.5;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Validate()));
  c = TierManagerConfig();
  c.index_shards = 12;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Validate()));
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(testing::HostTier(4 * kPage, kPage));
  EXPECT_TRUE(absl::IsInvalidArgument(TierManager::Create(c, std::move(tiers)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(TierManager::Create(TierManagerConfig(), {}).status()));
}

}  // namespace
}  // namespace kvtier::tiers
