// A real kvtierd with an HBM tier on the emulated device: pages PUT from and
// GET into a client's device buffer (GpuArena on the emulated device) through
// every tier path — HBM->client D2D, host->client H2D, NVMe->host->client —
// byte-exact; the same pages through an ordinary shm buffer; registration
// errors; and the device shown by STATS and kvtierctl.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_process.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;  // 64 KiB
constexpr size_t kPages = 96;                // > hbm (32) + host (32): some reach NVMe

class HbmDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonOptions o;
    o.nvme = true;
    // No lookahead: a LOOKUP must not move pages before the GET that checks
    // each tier's copy path.
    o.flags = {"--hbm_device=emulated", "--hbm_bytes=2MiB", "--host_bytes=2MiB",
               "--prefetch_lookahead=false"};
    auto d = DaemonProcess::Start(o);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    auto c = Client::Connect(Options(daemon_->endpoint()));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  // PUTs a chain of kPages pattern pages from a device arena.
  std::vector<PageKey> PutChain(uint64_t seed) {
    auto arena = GpuArena::Create(kPages * kPage, ArenaKind::kEmulatedDevice);
    EXPECT_TRUE(arena.ok()) << arena.status();
    auto keys = MakeChain(SmallLayout(), seed, kPages);
    std::vector<uint8_t> page(kPage);
    for (size_t i = 0; i < kPages; ++i) {
      tools::FillPattern(keys[i], page.data(), kPage);
      EXPECT_TRUE((*arena)->Write(i * kPage, page.data(), kPage).ok());
    }
    auto id = (*arena)->Register(*client_);
    EXPECT_TRUE(id.ok()) << id.status();
    // In chunks, as a model's prefill would: each PUT finds the earlier
    // pages committed, so a full HBM tier demotes them to the host tier.
    constexpr size_t kChunk = 16;
    for (size_t b = 0; b < kPages; b += kChunk) {
      std::vector<uint64_t> offsets(kChunk);
      for (size_t i = 0; i < kChunk; ++i) offsets[i] = (b + i) * kPage;
      const PageKey parent = b == 0 ? PageKey::Zero() : keys[b - 1];
      auto put = client_->Put(absl::MakeConstSpan(keys).subspan(b, kChunk), parent, *id, offsets);
      EXPECT_TRUE(put.ok()) << put.status();
      if (put.ok()) {
        EXPECT_EQ(put->stored, kChunk) << "chunk at " << b;
      }
    }
    EXPECT_TRUE(client_->UnregisterBuffer(*id).ok());
    return keys;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(HbmDaemonTest, GetIntoDeviceBufferFromEveryTierIsByteExact) {
  std::vector<PageKey> keys = PutChain(11);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // evictor settles
  auto where = client_->Lookup(keys);
  ASSERT_TRUE(where.ok()) << where.status();
  ASSERT_EQ(where->hits, kPages);
  std::set<TierKind> tiers(where->tiers.begin(), where->tiers.end());
  ASSERT_EQ(tiers, (std::set<TierKind>{TierKind::kHbm, TierKind::kHost, TierKind::kNvme}))
      << "the chain should span all three tiers";

  auto arena = GpuArena::Create(kPages * kPage, ArenaKind::kEmulatedDevice);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto id = (*arena)->Register(*client_);
  ASSERT_TRUE(id.ok()) << id.status();
  // One page at a time, so each GET takes exactly the path LOOKUP reported.
  // Host pages first: an NVMe page read later moves up into the host tier
  // and pushes host pages down.
  std::vector<size_t> order;
  for (TierKind t : {TierKind::kHost, TierKind::kHbm, TierKind::kNvme})
    for (size_t i = 0; i < kPages; ++i)
      if (where->tiers[i] == t) order.push_back(i);
  std::vector<uint8_t> got(kPage);
  std::set<TierKind> served;
  for (size_t i : order) {
    auto g = client_->Get({&keys[i], 1}, *id, {i * kPage});
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(g->size(), 1u);
    ASSERT_EQ((*g)[0], where->tiers[i]) << "page " << i;
    served.insert((*g)[0]);
    ASSERT_TRUE((*arena)->Read(i * kPage, got.data(), kPage).ok());
    EXPECT_EQ(tools::CheckPattern(keys[i], got.data(), kPage), kPage)
        << "page " << i << " from " << TierKindName((*g)[0]) << " corrupted";
  }
  EXPECT_EQ(served, tiers) << "every tier path was taken";
  // And all at once (coalesced batches), after moving pages around.
  std::vector<uint8_t> zero(kPages * kPage, 0);
  ASSERT_TRUE((*arena)->Write(0, zero.data(), zero.size()).ok());
  auto all = client_->Get(keys, *id, Offsets(kPages));
  ASSERT_TRUE(all.ok()) << all.status();
  for (size_t i = 0; i < kPages; ++i) {
    ASSERT_NE((*all)[i], TierKind::kNone) << "page " << i;
    ASSERT_TRUE((*arena)->Read(i * kPage, got.data(), kPage).ok());
    EXPECT_EQ(tools::CheckPattern(keys[i], got.data(), kPage), kPage) << "page " << i;
  }
}

// One PUT bigger than HBM + host: its last pages are reserved straight on
// NVMe, so they go D2H through a staging buffer (for their checksum).
TEST_F(HbmDaemonTest, OneLargePutFromDeviceReachesNvmeDirectly) {
  auto arena = GpuArena::Create(kPages * kPage, ArenaKind::kEmulatedDevice);
  ASSERT_TRUE(arena.ok()) << arena.status();
  auto keys = MakeChain(SmallLayout(), 21, kPages);
  std::vector<uint8_t> page(kPage);
  for (size_t i = 0; i < kPages; ++i) {
    tools::FillPattern(keys[i], page.data(), kPage);
    ASSERT_TRUE((*arena)->Write(i * kPage, page.data(), kPage).ok());
  }
  auto id = (*arena)->Register(*client_);
  ASSERT_TRUE(id.ok()) << id.status();
  auto put = client_->Put(keys, PageKey::Zero(), *id, Offsets(kPages));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, kPages);
  auto where = client_->Lookup(keys);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tiers.back(), TierKind::kNvme);
  std::vector<uint8_t> zero(kPages * kPage, 0);
  ASSERT_TRUE((*arena)->Write(0, zero.data(), zero.size()).ok());
  auto g = client_->Get(keys, *id, Offsets(kPages));
  ASSERT_TRUE(g.ok()) << g.status();
  for (size_t i = 0; i < kPages; ++i) {
    ASSERT_TRUE((*arena)->Read(i * kPage, page.data(), kPage).ok());
    EXPECT_EQ(tools::CheckPattern(keys[i], page.data(), kPage), kPage)
        << "page " << i << " from " << TierKindName((*g)[i]);
  }
}

TEST_F(HbmDaemonTest, ShmBufferSeesHbmPagesToo) {
  std::vector<PageKey> keys = PutChain(12);
  auto shm = ShmBuffer::Create(kPages * kPage);
  ASSERT_TRUE(shm.ok());
  auto id = client_->RegisterBuffer((*shm)->name(), (*shm)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  auto g = client_->Get(keys, *id, Offsets(kPages));
  ASSERT_TRUE(g.ok()) << g.status();
  bool any_hbm = false;
  for (size_t i = 0; i < kPages; ++i) {
    any_hbm |= (*g)[i] == TierKind::kHbm;
    EXPECT_EQ(tools::CheckPattern(keys[i], (*shm)->data() + i * kPage, kPage), kPage)
        << "page " << i << " from " << TierKindName((*g)[i]);
  }
  EXPECT_TRUE(any_hbm);
  auto inline_pages = client_->GetInline({&keys.back(), 1});
  ASSERT_TRUE(inline_pages.ok()) << inline_pages.status();
  EXPECT_EQ(tools::CheckPattern(keys.back(),
                                reinterpret_cast<const uint8_t*>((*inline_pages)[0].data()), kPage),
            kPage);
}

TEST_F(HbmDaemonTest, DeviceRegistrationErrorsNameTheProblem) {
  auto st = client_->RegisterDeviceBuffer(DeviceBufferKind::kEmulated, "/kvtier-devarena-none", 0,
                                          kPage).status();
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  std::string fake_cuda(64, '\x01');
  st = client_->RegisterDeviceBuffer(DeviceBufferKind::kCudaIpc, fake_cuda, 0, kPage).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "emulated")) << st;
  // The daemon's own HBM pool is never a client buffer, by either path.
  const std::string pool = absl::StrCat("/kvtier-emu-", daemon_->pid(), "-0");
  st = client_->RegisterDeviceBuffer(DeviceBufferKind::kEmulated, pool, 0, kPage).status();
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  st = client_->RegisterBuffer(pool, kPage).status();
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  // A GET past the end of a device buffer is refused before any copy.
  auto arena = GpuArena::Create(kPage, ArenaKind::kEmulatedDevice);
  ASSERT_TRUE(arena.ok());
  auto id = (*arena)->Register(*client_);
  ASSERT_TRUE(id.ok()) << id.status();
  auto keys = MakeChain(SmallLayout(), 13, 1);
  st = client_->Get(keys, *id, {kPage}).status();
  EXPECT_TRUE(absl::IsOutOfRange(st)) << st;
}

TEST_F(HbmDaemonTest, StatsShowTheDeviceAndTheHbmTier) {
  PutChain(14);
  auto stats = WireStats(*client_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->daemon().device(), "emulated (host memory)");
  ASSERT_GE(stats->tiers_size(), 3);
  EXPECT_EQ(stats->tiers(0).name(), "hbm");
  EXPECT_EQ(stats->tiers(0).backing(), "emulated (host memory)");
  EXPECT_EQ(stats->tiers(0).capacity_bytes(), 2u << 20);
  EXPECT_GT(stats->tiers(0).pages(), 0u);
  EXPECT_GT(stats->tiers(0).demotions(), 0u) << stats->DebugString();
  auto ctl = RunCommand({KVTIERCTL_PATH, "stats", "--endpoint=" + daemon_->endpoint()});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.err;
  EXPECT_TRUE(absl::StrContains(ctl.out, "hbm")) << ctl.out;
  EXPECT_TRUE(absl::StrContains(ctl.out, "emulated (host memory)")) << ctl.out;
  EXPECT_TRUE(absl::StrContains(daemon_->Log(), "device: emulated")) << daemon_->Log();
}

TEST(HbmDaemonFlagsTest, BadDeviceFlagsAreRefusedByName) {
  TempDir dir;
  auto bad = RunCommand({KVTIERD_PATH, "--hbm_device=gpu", "--state_dir=" + dir.File("s")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad.err, "--hbm_device")) << bad.err;
  auto none = RunCommand({KVTIERD_PATH, "--hbm_device=none", "--hbm_bytes=1MiB",
                          "--nvme_bytes=0", "--state_dir=" + dir.File("s"),
                          "--socket=" + dir.File("k.sock")});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(none.err, "--hbm_bytes")) << none.err;
}

}  // namespace
}  // namespace kvtier::itest
