// Tier byte counters tell the truth (issue 26, item 3): a workload of known
// bytes — PUT, GETs through a registered buffer, inline GET, a layer-wise
// GET, an EVICT that demotes to NVMe and a GET that promotes back — and
// every tier's bytes_in/bytes_out in STATS, exactly. (A replay once served
// 11.41 GB from RAM while the host tier's BYTES OUT said 0: GET copies from
// a RAM slot went through Address(), which the tier cannot see.)
#include <cstring>
#include <string>
#include <vector>

#include "client/wire_calls.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;

class CountersTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o;
    o.nvme = true;
    // No LOOKUP lookahead or prefetch: only the requests below move bytes.
    // 64 MiB of RAM holds the few pages far below every watermark, so
    // neither the evictor nor the cleaner moves any of them.
    o.flags = {"--prefetch_lookahead=false", "--promote_on_get=true", "--log_level=warn"};
    return o;
  }

  struct Bytes {
    uint64_t in = 0, out = 0;
  };
  Bytes TierBytes(Client& c, absl::string_view tier) {
    auto stats = WireStats(c);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok()) return {};
    const wire::TierStats* t = FindTier(*stats, tier);
    EXPECT_NE(t, nullptr) << tier;
    return t == nullptr ? Bytes{} : Bytes{t->bytes_in(), t->bytes_out()};
  }
};

TEST_F(CountersTest, EveryTierCountsEveryByteItMoves) {
  constexpr size_t kN = 4;  // pages PUT
  constexpr int kM = 3;     // GETs of all of them through the buffer
  constexpr size_t kK = 2;  // pages read by an inline GET
  auto c = Connect();
  ASSERT_TRUE(c);
  // Pages, then 8 bytes for the layer-wise GET's progress counter.
  auto buf = ShmBuffer::Create(kN * kPage + 4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto id = c->RegisterBuffer(**buf);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::vector<PageKey> keys = MakeChain(SmallLayout(), 26, kN);
  for (size_t i = 0; i < kN; ++i)
    std::memcpy((*buf)->data() + i * kPage, PatternPage(keys[i], kPage).data(), kPage);

  auto put = c->Put(keys, PageKey::Zero(), *id, Offsets(kN));
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, kN);
  Bytes host = TierBytes(*c, "host");
  EXPECT_EQ(host.in, kN * kPage) << "PUT copies into RAM";
  EXPECT_EQ(host.out, 0u);

  for (int m = 0; m < kM; ++m) {
    auto got = c->Get(keys, *id, Offsets(kN));
    ASSERT_TRUE(got.ok()) << got.status();
    for (TierKind t : *got) ASSERT_EQ(t, TierKind::kHost);
  }
  host = TierBytes(*c, "host");
  EXPECT_EQ(host.out, kM * kN * kPage) << "GET copies out of RAM";

  auto inline_pages = c->GetInline(absl::MakeConstSpan(keys).subspan(0, kK));
  ASSERT_TRUE(inline_pages.ok()) << inline_pages.status();
  for (size_t i = 0; i < kK; ++i) ASSERT_EQ((*inline_pages)[i], PatternPage(keys[i], kPage));
  host = TierBytes(*c, "host");
  EXPECT_EQ(host.out, (kM * kN + kK) * kPage) << "inline GET (zero-copy frames from the slot)";

  const uint32_t layers = SmallLayout().layers;
  uint32_t seen = 0;
  auto layered = c->GetLayers(absl::MakeConstSpan(keys).subspan(0, 1), *id, Offsets(1),
                              absl::MakeSpan((*buf)->data(), (*buf)->size()), kN * kPage,
                              [&](uint32_t) { ++seen; });
  ASSERT_TRUE(layered.ok()) << layered.status();
  EXPECT_EQ(seen, layers);
  host = TierBytes(*c, "host");
  EXPECT_EQ(host.out, (kM * kN + kK + 1) * kPage) << "layer-wise GET: every layer once";

  // Every page leaves RAM for NVMe: out of one, into the other.
  auto evicted = c->Evict("", TierKind::kHost, 0);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  host = TierBytes(*c, "host");
  Bytes nvme = TierBytes(*c, "nvme");
  EXPECT_EQ(host.out, (kM * kN + kK + 1 + kN) * kPage) << "demotion reads RAM";
  EXPECT_EQ(nvme.in, kN * kPage) << "demotion writes NVMe";
  EXPECT_EQ(nvme.out, 0u);

  // One page back: read from NVMe into a RAM slot (promotion), served from it.
  std::memset((*buf)->data(), 0, kPage);
  auto back = c->Get(absl::MakeConstSpan(keys).subspan(3, 1), *id, Offsets(1));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ((*back)[0], TierKind::kNvme);
  ASSERT_EQ(std::string(reinterpret_cast<const char*>((*buf)->data()), kPage),
            PatternPage(keys[3], kPage));
  host = TierBytes(*c, "host");
  nvme = TierBytes(*c, "nvme");
  EXPECT_EQ(nvme.out, kPage) << "the promotion's read";
  EXPECT_EQ(nvme.in, kN * kPage);
  EXPECT_EQ(host.in, (kN + 1) * kPage) << "the promotion lands in RAM";
  EXPECT_EQ(host.out, (kM * kN + kK + 1 + kN + 1) * kPage) << "and is served from there";
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(FindTier(*stats, "host")->promotions(), 1u);
}

}  // namespace
}  // namespace kvtier::itest
