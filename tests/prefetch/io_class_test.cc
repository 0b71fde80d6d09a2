// I/O classes through a real kvtierd on a real NVMe file: the evictor's
// write-back, the lookahead's promotions and a GET's reads reach the device
// under their own classes (the thread that issues the I/O sets it), and
// STATS reports each class's I/Os and latency for the NVMe tier.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "client/wire_calls.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kLen = 8;

class IoClassTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--host_bytes=4MiB", "--host_slab_bytes=1MiB", "--prefetch_lookahead=true",
                      "--nvme_prefetch_share=0.5", "--nvme_writeback_share=0.25"},
            .nvme = true};
  }
  // The NVMe tier's I/O count per class name ("" when STATS has none).
  std::map<std::string, uint64_t> NvmeClassIos() {
    std::map<std::string, uint64_t> ios;
    auto s = WireStats(*c_);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return ios;
    for (const auto& t : s->tiers()) {
      if (t.name() != "nvme") continue;
      for (const auto& k : t.io_classes()) {
        ios[k.name()] = k.ios();
        EXPECT_GE(k.latency_us(), 0u);
      }
    }
    return ios;
  }
  bool WaitFor(const std::function<bool()>& pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::unique_ptr<Client> c_;
};

TEST_F(IoClassTest, EvictorPrefetcherAndGetsUseTheirOwnClasses) {
  c_ = Connect();
  ASSERT_TRUE(c_);
  auto buf = ShmBuffer::Create(kLen * kPage);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto id = c_->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<uint64_t> offsets(kLen);
  for (size_t i = 0; i < kLen; ++i) offsets[i] = i * kPage;
  // 20 chains of 8 x 64 KiB into 4 MiB of RAM: the oldest go to NVMe.
  std::vector<std::vector<PageKey>> chains;
  for (uint64_t ch = 0; ch < 20; ++ch) {
    chains.push_back(MakeChain(SmallLayout(), 7000 + ch, kLen));
    for (size_t i = 0; i < kLen; ++i)
      tools::FillPattern(chains.back()[i], (*buf)->data() + i * kPage, kPage);
    auto put = c_->Put(chains.back(), PageKey::Zero(), *id, offsets);
    ASSERT_TRUE(put.ok()) << put.status();
  }
  // The evictor cleans and demotes: write-back.
  ASSERT_TRUE(WaitFor([&] { return NvmeClassIos()["writeback"] > 0; }))
      << "no write-back I/O counted";
  // The lookahead promotes the oldest chain: prefetch reads.
  auto l = c_->Lookup(chains.front());
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->hits, kLen);
  ASSERT_TRUE(WaitFor([&] { return NvmeClassIos()["prefetch"] > 0; }))
      << "no prefetch I/O counted";
  // A GET of a chain still on NVMe reads it on a copy worker: demand. Only
  // a page the LOOKUP left alone (no lookahead for chains[1]) is read here.
  const uint64_t demand_before = NvmeClassIos()["demand"];
  std::memset((*buf)->data(), 0, (*buf)->size());
  auto got = c_->Get(chains[1], *id, offsets);
  ASSERT_TRUE(got.ok()) << got.status();
  size_t from_nvme = 0;
  for (size_t i = 0; i < kLen; ++i) {
    from_nvme += (*got)[i] == TierKind::kNvme;
    EXPECT_EQ(tools::CheckPattern(chains[1][i], (*buf)->data() + i * kPage, kPage), kPage) << i;
  }
  // Served from NVMe or promoted by this GET: either way a demand read.
  EXPECT_GT(NvmeClassIos()["demand"], demand_before) << from_nvme << " pages served from NVMe";
}

}  // namespace
}  // namespace kvtier::itest
