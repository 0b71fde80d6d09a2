// Deep NVMe reads end to end (issue 14): a 32-page GET whose pages all sit
// on NVMe is served byte-exact through a registered buffer, and a page
// corrupted on disk in the middle of it is a miss (never wrong bytes) while
// the pages around it are served.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "client/wire_calls.h"
#include "absl/strings/str_cat.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kPages = 32;

class DeepReadsTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o;
    o.nvme = true;
    // Pages stay on NVMe: no promotion on GET, no LOOKUP lookahead.
    o.flags = {"--host_bytes=4MiB", "--promote_on_get=false", "--prefetch_lookahead=false",
               "--log_level=warn"};
    return o;
  }
};

TEST_F(DeepReadsTest, GetOf32NvmePagesIsByteExactAndACorruptPageIsAMiss) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = ShmBuffer::Create(kPages * kPage);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto id = c->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<PageKey> keys = MakeChain(SmallLayout(), 14, kPages);
  for (size_t i = 0; i < kPages; ++i) {
    const std::string page = PatternPage(keys[i], kPage);
    std::memcpy((*buf)->data() + i * kPage, page.data(), kPage);
  }
  auto put = c->Put(keys, PageKey::Zero(), *id, Offsets(kPages));
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, kPages);
  // Every page leaves RAM for NVMe.
  auto evicted = c->Evict("", TierKind::kHost, 0);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(FindTier(*stats, "nvme")->pages(), kPages);

  // The whole GET from NVMe, byte-exact.
  std::memset((*buf)->data(), 0, kPages * kPage);
  auto got = c->Get(keys, *id, Offsets(kPages));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < kPages; ++i) {
    ASSERT_EQ((*got)[i], TierKind::kNvme) << "page " << i;
    ASSERT_EQ(std::string(reinterpret_cast<const char*>((*buf)->data()) + i * kPage, kPage),
              PatternPage(keys[i], kPage))
        << "page " << i;
  }

  // Page 16 goes bad on disk: a miss, its bytes untouched; the rest served.
  const std::string data_file = daemon_->dir() + "/state/nvme/kvtier-nvme.data";
  ASSERT_TRUE(CorruptOnDisk(data_file, PatternPage(keys[16], kPage))) << data_file;
  std::memset((*buf)->data(), 0, kPages * kPage);
  got = c->Get(keys, *id, Offsets(kPages));
  ASSERT_TRUE(got.ok()) << got.status();
  const std::string zeros(kPage, '\0');
  for (size_t i = 0; i < kPages; ++i) {
    const std::string bytes(reinterpret_cast<const char*>((*buf)->data()) + i * kPage, kPage);
    if (i == 16) {
      EXPECT_EQ((*got)[i], TierKind::kNone) << "a corrupt page is a miss";
      EXPECT_TRUE(bytes == zeros) << "a corrupt page's bytes reached the client";
      continue;
    }
    EXPECT_EQ((*got)[i], TierKind::kNvme) << "page " << i;
    EXPECT_TRUE(bytes == PatternPage(keys[i], kPage)) << "page " << i;
  }
  stats = WireStats(*c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(FindTier(*stats, "nvme")->checksum_errors(), 1u);
  EXPECT_EQ(FindTier(*stats, "nvme")->pages(), kPages - 1) << "the corrupt page was dropped";
}

// Layer-wise GET of pages on NVMe (issue 14): pages of 8 layers (256 KiB)
// are read and verified layer by layer; every layer arrives in order,
// byte-exact; a page corrupted on disk inside layer 5 is a miss of which
// at most layers 0-4 (verified) were delivered, never a later one.
TEST_F(DeepReadsTest, LayerwiseGetOfNvmePagesIsVerifiedLayerByLayer) {
  const Layout layout{.layers = 8, .kv_heads = 2, .head_dim = 64, .tokens_per_page = 64,
                      .dtype = Dtype::kFp16};
  const uint64_t page = layout.PageBytes(), layer = page / layout.layers;
  constexpr size_t kN = 12;
  ClientOptions o = Options(daemon_->endpoint(), "default", "", /*with_layout=*/false);
  o.layout = layout;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto buf = ShmBuffer::Create(kN * page + 4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto id = (*c)->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<PageKey> keys = MakeChain(layout, 15, kN);
  for (size_t i = 0; i < kN; ++i)
    std::memcpy((*buf)->data() + i * page, PatternPage(keys[i], page).data(), page);
  auto put = (*c)->Put(keys, PageKey::Zero(), *id, Offsets(kN, page));
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, kN);
  ASSERT_TRUE((*c)->Evict("", TierKind::kHost, 0).ok());
  const std::string data_file = daemon_->dir() + "/state/nvme/kvtier-nvme.data";
  ASSERT_TRUE(CorruptOnDisk(data_file, PatternPage(keys[5], page), 5 * layer + 4096));

  std::memset((*buf)->data(), 0, (*buf)->size());
  absl::Span<uint8_t> mapping((*buf)->data(), (*buf)->size());
  std::vector<uint32_t> layers_seen;
  auto got = (*c)->GetLayers(keys, *id, Offsets(kN, page), mapping, kN * page,
                             [&](uint32_t l) { layers_seen.push_back(l); });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(layers_seen, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (size_t i = 0; i < kN; ++i) {
    const std::string want = PatternPage(keys[i], page);
    const char* have = reinterpret_cast<const char*>((*buf)->data()) + i * page;
    if (i != 5) {
      EXPECT_EQ((*got)[i], TierKind::kNvme) << "page " << i;
      EXPECT_TRUE(std::string(have, page) == want) << "page " << i;
      continue;
    }
    EXPECT_EQ((*got)[i], TierKind::kNone) << "a corrupt page is a miss";
    // Delivered: a prefix of its (verified) layers before the bad one.
    const std::string zeros(layer, '\0');
    bool prefix = true;
    for (uint64_t l = 0; l < layout.layers; ++l) {
      const std::string have_l(have + l * layer, layer);
      if (have_l == zeros) {
        prefix = false;
        continue;
      }
      EXPECT_TRUE(prefix && l < 5 && have_l == want.substr(l * layer, layer))
          << "layer " << l << " of the corrupt page reached the client";
    }
  }
  auto stats = WireStats(**c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(FindTier(*stats, "nvme")->checksum_errors(), 1u);
  EXPECT_EQ(FindTier(*stats, "nvme")->pages(), kN - 1) << "the corrupt page was dropped";
}

}  // namespace
}  // namespace kvtier::itest
