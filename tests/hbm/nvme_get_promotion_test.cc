// GETs of NVMe pages into a device buffer (issues 14 and 16) against a real
// kvtierd with host + NVMe + an HBM tier on the emulated device: the pages
// are read deep (ReadPages), arrive byte-exact, move up into the HBM tier so
// the next GET is served HBM->device; a page corrupted on disk is a miss
// whose bytes never reach the buffer; an HBM tier full of pinned pages
// leaves the pages in host memory (promote_on_get as before); with
// promote_on_get off they come exact from bounce buffers and stay on NVMe.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "client/wire_calls.h"
#include "kvtier/gpu_arena.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;  // 64 KiB; the HBM tier holds 32

class NvmeGetPromotionTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o;
    o.nvme = true;
    // No LOOKUP lookahead: only the GET moves pages.
    o.flags = {"--hbm_device=emulated", "--hbm_bytes=2MiB", "--host_bytes=2MiB",
               "--prefetch_lookahead=false", "--log_level=warn"};
    return o;
  }

  void SetUp() override {
    DaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    client_ = Connect();
    ASSERT_TRUE(client_);
  }

  // A device buffer of n pages, registered.
  BufferId NewArena(size_t n) {
    auto a = GpuArena::Create(n * kPage, ArenaKind::kEmulatedDevice);
    EXPECT_TRUE(a.ok()) << a.status();
    arenas_.push_back(*std::move(a));
    auto id = arenas_.back()->Register(*client_);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }
  GpuArena& arena() { return *arenas_.back(); }

  // PUTs a chain of n pattern pages from a fresh device arena.
  std::vector<PageKey> PutChain(uint64_t seed, size_t n) {
    std::vector<PageKey> keys = MakeChain(SmallLayout(), seed, n);
    const BufferId id = NewArena(n);
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(arena().Write(i * kPage, PatternPage(keys[i], kPage).data(), kPage).ok());
    auto put = client_->Put(keys, PageKey::Zero(), id, Offsets(n));
    EXPECT_TRUE(put.ok()) << put.status();
    if (put.ok()) {
      EXPECT_EQ(put->stored, n) << put->not_stored_reason;
    }
    return keys;
  }

  wire::TierStats Tier(absl::string_view name) {
    auto s = WireStats(*client_);
    EXPECT_TRUE(s.ok()) << s.status();
    const wire::TierStats* t = s.ok() ? FindTier(*s, name) : nullptr;
    return t != nullptr ? *t : wire::TierStats();
  }

  // GET of keys into the arena (zeroed first); checks each hit byte-exact
  // and each miss untouched. Returns the reply's tiers.
  std::vector<TierKind> GetAndCheck(const std::vector<PageKey>& keys, BufferId id) {
    const size_t n = keys.size();
    const std::string zeros(n * kPage, '\0');
    EXPECT_TRUE(arena().Write(0, zeros.data(), zeros.size()).ok());
    auto got = client_->Get(keys, id, Offsets(n));
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    std::string have(kPage, '\0');
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(arena().Read(i * kPage, have.data(), kPage).ok());
      const std::string want = (*got)[i] == TierKind::kNone ? zeros.substr(0, kPage)
                                                            : PatternPage(keys[i], kPage);
      EXPECT_TRUE(have == want) << "page " << i << " from " << TierKindName((*got)[i]);
    }
    return *got;
  }

  std::unique_ptr<Client> client_;
  std::vector<std::unique_ptr<GpuArena>> arenas_;
};

TEST_F(NvmeGetPromotionTest, NvmePagesMoveIntoHbmAndTheNextGetIsServedFromThere) {
  constexpr size_t kN = 16;
  std::vector<PageKey> keys = PutChain(31, kN);
  // Down to NVMe: HBM -> host -> NVMe.
  ASSERT_TRUE(client_->Evict("", TierKind::kHbm, 0).ok());
  ASSERT_TRUE(client_->Evict("", TierKind::kHost, 0).ok());
  ASSERT_EQ(Tier("nvme").pages(), kN);
  ASSERT_EQ(Tier("hbm").pages(), 0u);
  const uint64_t promotions = Tier("hbm").promotions();

  const BufferId id = NewArena(kN);
  std::vector<TierKind> first = GetAndCheck(keys, id);
  ASSERT_EQ(first, std::vector<TierKind>(kN, TierKind::kNvme));
  const wire::TierStats hbm = Tier("hbm");
  EXPECT_EQ(hbm.pages(), kN) << "every page read from NVMe moved up into HBM";
  EXPECT_EQ(hbm.promotions() - promotions, kN);
  EXPECT_EQ(Tier("host").pages(), 0u) << "host memory was only the way up";
  EXPECT_EQ(hbm.clean_pages(), kN) << "inclusive: the NVMe copies stay";

  std::vector<TierKind> second = GetAndCheck(keys, id);
  EXPECT_EQ(second, std::vector<TierKind>(kN, TierKind::kHbm));
}

TEST_F(NvmeGetPromotionTest, ACorruptNvmePageIsAMissAndNeverReachesTheBuffer) {
  constexpr size_t kN = 12, kBad = 5;
  std::vector<PageKey> keys = PutChain(32, kN);
  ASSERT_TRUE(client_->Evict("", TierKind::kHbm, 0).ok());
  ASSERT_TRUE(client_->Evict("", TierKind::kHost, 0).ok());
  const std::string data_file = daemon_->dir() + "/state/nvme/kvtier-nvme.data";
  ASSERT_TRUE(CorruptOnDisk(data_file, PatternPage(keys[kBad], kPage))) << data_file;

  const BufferId id = NewArena(kN);
  std::vector<TierKind> got = GetAndCheck(keys, id);  // the miss's bytes stay zero
  ASSERT_EQ(got.size(), kN);
  for (size_t i = 0; i < kN; ++i)
    EXPECT_EQ(got[i], i == kBad ? TierKind::kNone : TierKind::kNvme) << "page " << i;
  EXPECT_EQ(Tier("nvme").checksum_errors(), 1u);
  EXPECT_EQ(Tier("hbm").pages(), kN - 1) << "the others moved up into HBM";
  EXPECT_EQ(Tier("nvme").pages() + Tier("host").pages(), 0u) << "the corrupt page was dropped";
  got = GetAndCheck(keys, id);
  for (size_t i = 0; i < kN; ++i)
    EXPECT_EQ(got[i], i == kBad ? TierKind::kNone : TierKind::kHbm) << "page " << i;
}

// promote_on_get=false: every page comes from a bounce buffer (copied out
// before the buffer goes back), exact, and nothing moves.
class NoPromotionTest : public NvmeGetPromotionTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o = NvmeGetPromotionTest::DaemonOpts();
    o.flags.push_back("--promote_on_get=false");
    return o;
  }
};

TEST_F(NoPromotionTest, BounceReadPagesAreExactAndStayOnNvme) {
  constexpr size_t kN = 24;
  std::vector<PageKey> keys = PutChain(35, kN);
  ASSERT_TRUE(client_->Evict("", TierKind::kHbm, 0).ok());
  ASSERT_TRUE(client_->Evict("", TierKind::kHost, 0).ok());
  const BufferId id = NewArena(kN);
  for (int round = 0; round < 2; ++round)
    EXPECT_EQ(GetAndCheck(keys, id), std::vector<TierKind>(kN, TierKind::kNvme));
  EXPECT_EQ(Tier("nvme").pages(), kN);
  EXPECT_EQ(Tier("hbm").promotions() + Tier("host").promotions(), 0u);
}

// HBM full and every page of it pinned (leased): no clean room there, so
// the GET's pages stay in host memory, as without an HBM tier.
class FullHbmTest : public NvmeGetPromotionTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o = NvmeGetPromotionTest::DaemonOpts();
    // HBM may fill to the last byte (no background demotion), and the
    // leases may pin all of it.
    o.flags.insert(o.flags.end(), {"--high_watermark=1", "--low_watermark=0.99",
                                   "--clean_fraction=0", "--prefetch_max_pinned=16MiB",
                                   "--prefetch_max_leased_per_tenant=16MiB"});
    return o;
  }
};

TEST_F(FullHbmTest, PromotionFallsBackToHostAndTheGetIsStillExact) {
  constexpr size_t kFull = 32, kN = 8;
  std::vector<PageKey> pinned = PutChain(33, kFull);
  ASSERT_EQ(Tier("hbm").pages(), kFull);
  auto lease = client_->Lookup(pinned, LookupOptions{.lease = std::chrono::seconds(60)});
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(lease->leased, kFull);

  std::vector<PageKey> keys = PutChain(34, kN);  // lands in host: HBM is full
  ASSERT_TRUE(client_->Evict("", TierKind::kHost, 0).ok());
  ASSERT_EQ(Tier("nvme").pages(), kN);
  const uint64_t hbm_promotions = Tier("hbm").promotions();
  const uint64_t host_promotions = Tier("host").promotions();

  const BufferId id = NewArena(kN);
  EXPECT_EQ(GetAndCheck(keys, id), std::vector<TierKind>(kN, TierKind::kNvme));
  EXPECT_EQ(Tier("hbm").promotions(), hbm_promotions);
  EXPECT_EQ(Tier("hbm").pages(), kFull);
  EXPECT_EQ(Tier("host").promotions() - host_promotions, kN);
  EXPECT_EQ(Tier("host").pages(), kN);
  EXPECT_EQ(GetAndCheck(keys, id), std::vector<TierKind>(kN, TierKind::kHost));
}

}  // namespace
}  // namespace kvtier::itest
