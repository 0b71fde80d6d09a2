// The GPU data path end to end on a real GPU: kvtierd with --hbm_device=cuda,
// a client GpuArena in CUDA memory registered by IPC handle, PUT from it and
// GET into it through every tier (HBM->client D2D, host->client H2D,
// NVMe->host->client), byte-exact. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/gpu_arena.h"
#include "tests/integration/daemon_process.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kPages = 96;
constexpr size_t kChunk = 16;

TEST(GpuDaemonTest, PutAndGetThroughCudaIpcBufferOverEveryTier) {
  std::string why;
  if (!GpuArena::CudaAvailable(&why)) GTEST_SKIP() << "no usable CUDA device (" << why << ")";
  DaemonOptions o;
  o.nvme = true;
  o.flags = {"--hbm_device=cuda", "--hbm_bytes=2MiB", "--host_bytes=2MiB",
             "--prefetch_lookahead=false"};  // LOOKUP must not move pages before the GETs
  auto d = DaemonProcess::Start(o, "default", "", 60000);  // CUDA init is slow
  ASSERT_TRUE(d.ok()) << d.status();
  auto c = Client::Connect(Options((*d)->endpoint()));
  ASSERT_TRUE(c.ok()) << c.status();
  auto stats = WireStats(**c);
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(absl::StartsWith(stats->daemon().device(), "cuda:")) << stats->daemon().device();

  auto arena = GpuArena::Create(kPages * kPage, ArenaKind::kCuda);
  ASSERT_TRUE(arena.ok()) << arena.status();
  ASSERT_TRUE((*arena)->on_gpu());
  auto id = (*arena)->Register(**c);
  ASSERT_TRUE(id.ok()) << id.status();
  auto keys = MakeChain(SmallLayout(), 31, kPages);
  std::vector<uint8_t> page(kPage);
  for (size_t i = 0; i < kPages; ++i) {
    tools::FillPattern(keys[i], page.data(), kPage);
    ASSERT_TRUE((*arena)->Write(i * kPage, page.data(), kPage).ok());
  }
  for (size_t b = 0; b < kPages; b += kChunk) {
    std::vector<uint64_t> offsets(kChunk);
    for (size_t i = 0; i < kChunk; ++i) offsets[i] = (b + i) * kPage;
    auto put = (*c)->Put(absl::MakeConstSpan(keys).subspan(b, kChunk),
                         b == 0 ? PageKey::Zero() : keys[b - 1], *id, offsets);
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(put->stored, kChunk);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto where = (*c)->Lookup(keys);
  ASSERT_TRUE(where.ok());
  ASSERT_EQ(where->hits, kPages);
  std::vector<uint8_t> zero(kPages * kPage, 0);
  ASSERT_TRUE((*arena)->Write(0, zero.data(), zero.size()).ok());
  std::set<TierKind> served;
  for (TierKind t : {TierKind::kHost, TierKind::kHbm, TierKind::kNvme}) {
    for (size_t i = 0; i < kPages; ++i) {
      if (where->tiers[i] != t) continue;
      auto g = (*c)->Get({&keys[i], 1}, *id, {i * kPage});
      ASSERT_TRUE(g.ok()) << g.status();
      ASSERT_EQ((*g)[0], t) << "page " << i;
      served.insert(t);
      ASSERT_TRUE((*arena)->Read(i * kPage, page.data(), kPage).ok());
      EXPECT_EQ(tools::CheckPattern(keys[i], page.data(), kPage), kPage)
          << "page " << i << " from " << TierKindName(t);
    }
  }
  EXPECT_EQ(served.size(), 3u) << "every tier path was taken";
}

}  // namespace
}  // namespace kvtier::itest
