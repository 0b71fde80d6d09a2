// Reserved shares (issue 12) on a host tier over an NVMe tier (memory
// device, real RocksDB index): an attacker's flood that demotes into NVMe,
// and its promotions into host, never take a victim's pages out of a tier
// below its reserve there. Host-only cases: tiers_reserve_test.cc.
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/unit/nvme_test_fixture.h"

namespace kvtier::tiers {
namespace {

using testing::TestEviction;

constexpr uint64_t kHostPages = 16;
constexpr uint64_t kNvmePages = 64;

class ReserveNvmeTest : public NvmeTierTest {
 protected:
  // Host of kHostPages over NVMe of kNvmePages; "victim" with the given
  // reserves (in pages), "attacker" with none.
  void OpenWithReserves(uint64_t host_reserve, uint64_t nvme_reserve) {
    NvmeTierConfig nc = NvmeConfig();
    nc.capacity_bytes = kNvmePages * kPage;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(HostTier(kHostPages * kPage, kPage));
    auto nvme = CreateNvmeTier(nc, nvme::CreateMemoryDevice(nc.capacity_bytes));
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    tiers.push_back(*std::move(nvme));
    TierManagerConfig config = NoThreadConfig();  // the host tier's policy (TestEviction)
    config.eviction[TierKind::kNvme] = TestEviction();
    auto m = TierManager::Create(config, std::move(tiers));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    NamespaceConfig victim;
    victim.name = "victim";
    if (host_reserve != 0) victim.reserved_bytes[TierKind::kHost] = host_reserve * kPage;
    if (nvme_reserve != 0) victim.reserved_bytes[TierKind::kNvme] = nvme_reserve * kPage;
    auto id = mgr_->AddNamespace(victim);
    ASSERT_TRUE(id.ok()) << id.status();
    ns_["victim"] = *id;
    ns_["attacker"] = AddNs(*mgr_, "attacker");
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  }

  void PutPages(const std::string& tenant, uint64_t first, uint64_t n) {
    for (uint64_t k = first; k < first + n; ++k) ASSERT_TRUE(Put(*mgr_, ns_[tenant], k, kPage).ok());
  }

  // Pages of [first, first + n) in tier t; those on NVMe must read back right.
  uint64_t CountIn(const std::string& tenant, int t, uint64_t first, uint64_t n) {
    uint64_t count = 0;
    for (uint64_t k = first; k < first + n; ++k) {
      if (mgr_->Locate(ns_[tenant], Key(k)) != t) continue;
      ++count;
      auto pin = mgr_->PinForPromotion(ns_[tenant], Key(k));
      std::vector<uint8_t> got(kPage);
      EXPECT_TRUE(pin && pin->CopyTo(got.data()).ok()) << k;
      EXPECT_EQ(got, Bytes(kPage, k)) << k;
    }
    return count;
  }

  // What the evictor thread does after PUTs: host down to its low watermark
  // (demoting into NVMe, which makes room there), then NVMe.
  void RunEvictor() {
    mgr_->EvictTo(0, static_cast<uint64_t>(kHostPages * kPage * 0.9));
    mgr_->EvictTo(1, static_cast<uint64_t>(kNvmePages * kPage * 0.9));
  }
};

// The flood tests, under every eviction policy of both tiers.
class ReserveNvmePolicyTest : public ReserveNvmeTest,
                              public ::testing::WithParamInterface<EvictionPolicy> {
 protected:
  void SetUp() override {
    TestEviction() = GetParam();
    ReserveNvmeTest::SetUp();
  }
  void TearDown() override {
    ReserveNvmeTest::TearDown();
    TestEviction() = EvictionPolicy::kLru;
  }
};
KVTIER_EVERY_POLICY(ReserveNvmePolicyTest);

// The victim ends with pages 12..15 in host and 0..11 plus 16..39 on NVMe;
// then the attacker floods ten times the store through both tiers.
TEST_P(ReserveNvmePolicyTest, FloodKeepsReservesInBothTiers) {
  OpenWithReserves(/*host_reserve=*/4, /*nvme_reserve=*/16);
  if (mgr_ == nullptr) return;
  PutPages("victim", 0, 40);  // 16 in host, the rest straight to NVMe (host not clean)
  mgr_->EvictTo(0, 0);        // demotes 0..11; host keeps 12..15, its reserve
  EXPECT_EQ(CountIn("victim", 0, 0, 40), 4u);
  uint64_t stored = 0;
  for (uint64_t k = 1000; k < 1000 + 10 * (kHostPages + kNvmePages); ++k) {
    stored += Put(*mgr_, ns_["attacker"], k, kPage).ok();
    if (k % 8 == 0) RunEvictor();
  }
  EXPECT_GT(stored, 5 * (kHostPages + kNvmePages));  // it did flood
  // Host pages within the reserve were not demoted; on NVMe the oldest
  // went (16..35: PUT there before 0..11 were demoted) down to the reserve.
  EXPECT_EQ(CountIn("victim", 0, 12, 4), 4u);
  EXPECT_EQ(CountIn("victim", 1, 0, 12) + CountIn("victim", 1, 36, 4), 16u);
  EXPECT_EQ(mgr_->NamespacePages(ns_["victim"]), 20u);
  EXPECT_GT(Snap(1).evictions, 0u);
}

TEST_P(ReserveNvmePolicyTest, WithoutReservesTheFloodTakesEverything) {
  OpenWithReserves(0, 0);
  if (mgr_ == nullptr) return;
  PutPages("victim", 0, 40);
  mgr_->EvictTo(0, 0);
  for (uint64_t k = 1000; k < 1000 + 10 * (kHostPages + kNvmePages); ++k) {
    (void)Put(*mgr_, ns_["attacker"], k, kPage);
    if (k % 8 == 0) RunEvictor();
  }
  EXPECT_EQ(mgr_->NamespacePages(ns_["victim"]), 0u);
}

// The attacker's pages 1008..1031 sit on NVMe; the host holds 8 of the
// victim's (reserved or not) and 8 of the attacker's. Prefetch promotes with
// kMayWrite (demoting to make room).
class ReservePromotionTest
    : public ReserveNvmeTest,
      public ::testing::WithParamInterface<std::tuple<bool, EvictionPolicy>> {
 protected:
  void SetUp() override {
    TestEviction() = std::get<1>(GetParam());
    ReserveNvmeTest::SetUp();
    OpenWithReserves(/*host_reserve=*/reserved() ? 8 : 0, 0);
    if (mgr_ == nullptr) return;
    PutPages("victim", 0, 8);
    PutPages("attacker", 1000, 32);  // 1000..1007 in host, the rest on NVMe
    ASSERT_EQ(CountIn("attacker", 1, 1008, 24), 24u);
  }
  std::vector<PageKey> AttackerNvmeKeys() {
    std::vector<PageKey> keys;
    for (uint64_t k = 1008; k < 1032; ++k) keys.push_back(Key(k));
    return keys;
  }
  bool reserved() const { return std::get<0>(GetParam()); }
  void TearDown() override {
    ReserveNvmeTest::TearDown();
    TestEviction() = EvictionPolicy::kLru;
  }
};

TEST_P(ReservePromotionTest, PromotionsOneAtATimeTakeOnlyTheAttackersRoom) {
  if (mgr_ == nullptr) return;
  for (const PageKey& key : AttackerNvmeKeys()) {
    auto r = mgr_->PromoteBatch(ns_["attacker"], absl::MakeConstSpan(&key, 1), 0,
                                EvictMode::kMayWrite);
    EXPECT_EQ(r[0].outcome, PromoteOutcome::kPromoted) << static_cast<int>(r[0].outcome);
  }  // each lease goes at the end of its iteration
  EXPECT_EQ(CountIn("victim", 0, 0, 8), reserved() ? 8u : 0u);
}

// Leases held: once the attacker's unleased host pages are gone, the rest
// find no room rather than the victim's reserved pages.
TEST_P(ReservePromotionTest, LeasesDoNotTakeReservedRoom) {
  if (mgr_ == nullptr) return;
  const std::vector<PageKey> keys = AttackerNvmeKeys();
  std::vector<PromoteResult> leases =
      mgr_->PromoteBatch(ns_["attacker"], keys, 0, EvictMode::kMayWrite);
  size_t promoted = 0, no_room = 0;
  for (const PromoteResult& r : leases) {
    promoted += r.outcome == PromoteOutcome::kPromoted;
    no_room += r.outcome == PromoteOutcome::kNoRoom;
  }
  EXPECT_EQ(promoted, reserved() ? 8u : 16u);
  EXPECT_EQ(no_room, keys.size() - promoted);
  EXPECT_EQ(CountIn("victim", 0, 0, 8), reserved() ? 8u : 0u);
}

INSTANTIATE_TEST_SUITE_P(ReserveOnOff, ReservePromotionTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(EvictionPolicy::kLru,
                                                              EvictionPolicy::k2q,
                                                              EvictionPolicy::kArc,
                                                              EvictionPolicy::kS3Fifo,
                                                              EvictionPolicy::kPrefix)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Reserved" : "Unreserved") +
                                  "_" + std::string(EvictionPolicyName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace kvtier::tiers
