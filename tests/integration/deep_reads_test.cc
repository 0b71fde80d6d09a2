// Deep NVMe reads end to end (issue 14): a 32-page GET whose pages all sit
// on NVMe is served byte-exact through a registered buffer, and a page
// corrupted on disk in the middle of it is a miss (never wrong bytes) while
// the pages around it are served.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kPages = 32;

// Overwrites the first 4 KiB of the page whose bytes are `page` in the NVMe
// data file (found by content: slots are 4 KiB-aligned). False when absent.
bool CorruptOnDisk(const std::string& data_file, const std::string& page) {
  const int fd = open(data_file.c_str(), O_RDWR);
  if (fd < 0) return false;
  std::vector<char> block(4096);
  bool done = false;
  for (off_t at = 0; !done && pread(fd, block.data(), block.size(), at) == 4096; at += 4096) {
    if (std::memcmp(block.data(), page.data(), block.size()) != 0) continue;
    std::vector<char> junk(4096, '\x5a');
    done = pwrite(fd, junk.data(), junk.size(), at) == 4096 && fdatasync(fd) == 0;
  }
  close(fd);
  return done;
}

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
  auto stats = c->Stats();
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
  stats = c->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(FindTier(*stats, "nvme")->checksum_errors(), 1u);
  EXPECT_EQ(FindTier(*stats, "nvme")->pages(), kPages - 1) << "the corrupt page was dropped";
}

}  // namespace
}  // namespace kvtier::itest
