// The HBM tier on the EmulatedDevice, alone and as the top tier of the
// store: slots and device copies, PUT placement, the demotion chain
// hbm -> host -> nvme -> miss with the page bytes checked after every hop,
// promotion from NVMe landing in the host tier, and MarkFilled after a DMA.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/hbm/hbm_tier.h"
#include "tiers/shared_cache/memory_shared_cache.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Bytes;
using testing::HostTier;
using testing::Key;
using testing::NoThreadConfig;
using testing::Put;

constexpr uint64_t kPage = 64 << 10;
constexpr uint64_t kSlab = 1 << 20;

std::unique_ptr<HbmTier> MakeHbm(std::shared_ptr<hbm::Device> dev, uint64_t pages) {
  auto t = HbmTier::Create({.capacity_bytes = pages * kPage < kSlab ? kSlab : pages * kPage,
                            .slab_bytes = kSlab},
                           std::move(dev));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

TEST(HbmTierTest, SlotsAreDeviceMemoryMovedByCopies) {
  auto dev = hbm::CreateEmulatedDevice();
  auto tier = MakeHbm(dev, 16);
  EXPECT_EQ(tier->kind(), TierKind::kHbm);
  EXPECT_EQ(tier->backing(), "emulated (host memory)");
  EXPECT_EQ(tier->capacity_bytes(), kSlab);
  auto slot = tier->Allocate(kPage);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(tier->Address(*slot), nullptr) << "device memory is not host-addressable";
  EXPECT_EQ(tier->Region().first, nullptr);
  std::vector<uint8_t> in = Bytes(kPage, 5), out(kPage);
  ASSERT_TRUE(tier->Write(*slot, 0, in.data(), kPage).ok());
  ASSERT_TRUE(tier->Read(*slot, 0, out.data(), kPage).ok());
  EXPECT_EQ(in, out);
  // The slot's device pointer is what the GPU data path copies from.
  std::vector<uint8_t> via_ptr(kPage);
  ASSERT_TRUE(dev->Copy(hbm::CopyKind::kDeviceToHost,
                        {{via_ptr.data(), tier->DevicePtr(*slot), kPage}})
                  .ok());
  EXPECT_EQ(via_ptr, in);
  EXPECT_TRUE(absl::IsOutOfRange(tier->Read(*slot, 1, out.data(), kPage)));
  EXPECT_EQ(tier->io_counters().bytes_written, kPage);
  EXPECT_EQ(tier->io_counters().bytes_read, kPage);
  tier->Free(*slot);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(HbmTierTest, ConfigErrorsNameTheField) {
  auto dev = hbm::CreateEmulatedDevice();
  auto t = HbmTier::Create({.capacity_bytes = 1000, .slab_bytes = kSlab}, dev);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_NE(t.status().message().find("capacity_bytes"), std::string::npos) << t.status();
  EXPECT_FALSE(HbmTier::Create({.capacity_bytes = kSlab, .slab_bytes = kSlab}, nullptr).ok());
}

class HbmChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-hbm-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    dev_ = hbm::CreateEmulatedDevice();
    std::vector<std::unique_ptr<Tier>> tiers;
    auto hbm = MakeHbm(dev_, 16);
    hbm_ = hbm.get();
    tiers.push_back(std::move(hbm));
    tiers.push_back(HostTier(16 * kPage, kPage));
    NvmeTierConfig nc;
    nc.dir = dir_.string();
    nc.capacity_bytes = 16 * kSlab;
    nc.slab_bytes = kSlab;
    auto nvme = CreateNvmeTier(nc, nvme::CreateMemoryDevice(nc.capacity_bytes));
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    tiers.push_back(*std::move(nvme));
    auto m = TierManager::Create(NoThreadConfig(), std::move(tiers));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    ns_ = AddNs(*mgr_, "a");
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  }
  void TearDown() override {
    mgr_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The page's tier after a LOOKUP, and its bytes checked through a pin.
  TierKind Where(uint64_t key) {
    PageKey k = Key(key);
    LookupResult r = mgr_->Lookup(ns_, absl::MakeConstSpan(&k, 1));
    return r.hits == 1 ? r.tiers[0] : TierKind{0};
  }
  void ExpectBytes(uint64_t key) {
    auto pin = mgr_->PinForRead(ns_, Key(key));
    ASSERT_TRUE(pin.has_value()) << "page " << key << " missing";
    std::vector<uint8_t> got(kPage);
    ASSERT_TRUE(pin->CopyTo(got.data()).ok());
    EXPECT_EQ(got, Bytes(kPage, key)) << "page " << key << " in " << TierName(pin->tier());
  }

  std::filesystem::path dir_;
  std::shared_ptr<hbm::Device> dev_;
  HbmTier* hbm_ = nullptr;  // owned by mgr_
  std::unique_ptr<TierManager> mgr_;
  NamespaceId ns_ = 0;
};

TEST_F(HbmChainTest, DemotionChainKeepsBytesExactAtEveryHop) {
  ASSERT_TRUE(Put(*mgr_, ns_, 1, kPage).ok());
  EXPECT_EQ(Where(1), TierKind::kHbm) << "PUT lands in the top tier when it has room";
  ExpectBytes(1);
  EXPECT_EQ(mgr_->EvictTo(0, 0), 1u);  // hbm -> host (D2H into a host slot)
  EXPECT_EQ(Where(1), TierKind::kHost);
  ExpectBytes(1);
  EXPECT_EQ(mgr_->EvictTo(1, 0), 1u);  // host -> nvme
  EXPECT_EQ(Where(1), TierKind::kNvme);
  ExpectBytes(1);
  EXPECT_EQ(mgr_->EvictTo(2, 0), 1u);  // nvme -> out of the store
  EXPECT_EQ(Where(1), TierKind{0});
  EXPECT_FALSE(mgr_->PinForRead(ns_, Key(1)).has_value());
  StoreSnapshot s = mgr_->Snapshot();
  ASSERT_EQ(s.tiers.size(), 3u);
  EXPECT_EQ(s.tiers[0].kind, TierKind::kHbm);
  EXPECT_EQ(s.tiers[0].demotions, 1u);
  EXPECT_EQ(s.tiers[1].demotions, 1u);
  EXPECT_EQ(s.tiers[2].dropped, 1u);
}

TEST_F(HbmChainTest, FullHbmDemotesInlineOnPut) {
  for (uint64_t k = 1; k <= 24; ++k) ASSERT_TRUE(Put(*mgr_, ns_, k, kPage).ok()) << k;
  int hbm = 0, host = 0;
  for (uint64_t k = 1; k <= 24; ++k) {
    TierKind t = Where(k);
    hbm += t == TierKind::kHbm;
    host += t == TierKind::kHost;
    ExpectBytes(k);
  }
  EXPECT_EQ(hbm, 16);
  EXPECT_EQ(host, 8);
  EXPECT_EQ(Where(24), TierKind::kHbm) << "the newest pages stay on the GPU";
}

TEST_F(HbmChainTest, PromotionFromNvmeLandsInHostTier) {
  ASSERT_TRUE(Put(*mgr_, ns_, 7, kPage).ok());
  mgr_->EvictTo(0, 0);
  mgr_->EvictTo(1, 0);
  ASSERT_EQ(Where(7), TierKind::kNvme);
  auto pin = mgr_->PinForRead(ns_, Key(7));
  ASSERT_TRUE(pin.has_value());
  EXPECT_TRUE(mgr_->Promote(*pin));
  EXPECT_EQ(pin->tier(), TierKind::kHost);
  ASSERT_NE(pin->data(), nullptr);
  EXPECT_EQ(std::vector<uint8_t>(pin->data(), pin->data() + kPage), Bytes(kPage, 7));
  // An HBM page is not "promoted" anywhere: it is already above the host.
  pin.reset();
  ASSERT_TRUE(Put(*mgr_, ns_, 8, kPage).ok());
  auto top = mgr_->PinForRead(ns_, Key(8));
  ASSERT_TRUE(top.has_value());
  EXPECT_FALSE(mgr_->Promote(*top));
  EXPECT_EQ(top->tier(), TierKind::kHbm);
}

TEST_F(HbmChainTest, MarkFilledPublishesBytesCopiedByDma) {
  auto r = mgr_->Reserve(ns_, Key(3), PageKey::Zero(), kPage);
  ASSERT_TRUE(r.ok());
  Reservation& res = r->reservation;
  ASSERT_EQ(res.tier(), TierKind::kHbm);
  EXPECT_FALSE(res.NeedsHostBytes());
  EXPECT_EQ(res.data(), nullptr);
  // The daemon's PUT from a client GPU buffer: D2D into the slot, then mark.
  std::vector<uint8_t> bytes = Bytes(kPage, 3);
  auto client = dev_->Allocate(kPage);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(dev_->Copy(hbm::CopyKind::kHostToDevice, {{*client, bytes.data(), kPage}}).ok());
  ASSERT_TRUE(
      dev_->Copy(hbm::CopyKind::kDeviceToDevice, {{hbm_->DevicePtr(res.slot()), *client, kPage}})
          .ok());
  ASSERT_TRUE(res.MarkFilled().ok());
  EXPECT_TRUE(res.Commit());
  ExpectBytes(3);
  dev_->Free(*client);
}

// Issue 23, item 9: a lease's hold read the entry's slot without the shard
// lock while a promotion switched it (a data race TSan reports). A hold
// now reads the page's size once, under the lock.
TEST_F(HbmChainTest, HoldsReadTheirSizeWhilePromotionsSwitchTheSlot) {
  constexpr uint64_t kKeys = 8;
  for (uint64_t k = 1; k <= kKeys; ++k) ASSERT_TRUE(Put(*mgr_, ns_, 100 + k, kPage).ok());
  mgr_->EvictTo(0, 0);
  mgr_->EvictTo(1, 0);
  std::atomic<bool> stop{false};
  std::thread holder([&] {
    while (!stop) {
      for (uint64_t k = 1; k <= kKeys; ++k) {
        std::optional<PagePin> hold = mgr_->HoldForLease(ns_, Key(100 + k));
        if (hold) EXPECT_EQ(hold->bytes(), kPage);
      }
    }
  });
  for (int round = 0; round < 20; ++round) {
    for (uint64_t k = 1; k <= kKeys; ++k) {
      std::optional<PagePin> pin = mgr_->PinForPromotion(ns_, Key(100 + k));
      if (pin) (void)mgr_->PromoteTo(*pin, 1);
    }
    mgr_->EvictTo(1, 0);  // back down to NVMe, for the next round
  }
  stop = true;
  holder.join();
  for (uint64_t k = 1; k <= kKeys; ++k) ExpectBytes(100 + k);
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// Issue 23, item 2: a device-buffer PUT that lands in HBM with write-through
// to the shared cache once published the HBM slot's host address (null) and
// crashed. A reservation that publishes now needs the bytes on the host:
// MarkFilled refuses it, and Fill publishes exactly the page's bytes.
TEST(HbmSharedCacheTest, WriteThroughPutLandingInHbmPublishesHostBytes) {
  auto dev = hbm::CreateEmulatedDevice();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(MakeHbm(dev, 16));
  tiers.push_back(HostTier(16 * kPage, kPage));
  shared_cache::MemorySharedCache cache;
  TierManagerConfig config = NoThreadConfig();
  config.shared_write_through = true;
  auto m = TierManager::Create(config, std::move(tiers), &cache);
  ASSERT_TRUE(m.ok()) << m.status();
  const NamespaceId ns = AddNs(**m, "a");
  auto r = (*m)->Reserve(ns, Key(1), PageKey::Zero(), kPage);
  ASSERT_TRUE(r.ok()) << r.status();
  Reservation& res = r->reservation;
  ASSERT_EQ(res.tier(), TierKind::kHbm);
  EXPECT_EQ(res.data(), nullptr);
  EXPECT_TRUE(res.NeedsHostBytes());
  EXPECT_TRUE(absl::IsFailedPrecondition(res.MarkFilled()));
  const std::vector<uint8_t> page = Bytes(kPage, 1);
  ASSERT_TRUE(res.Fill(page.data()).ok());
  ASSERT_TRUE(res.Commit());
  EXPECT_EQ(cache.records(), 1u);
  std::vector<FetchedPage> got;
  cache.Fetch("a", {Key(1)}, kPage, [&](std::vector<FetchedPage> p) { got = std::move(p); });
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(std::vector<uint8_t>(got[0].bytes.get(), got[0].bytes.get() + kPage), page);
}

}  // namespace
}  // namespace kvtier::tiers
