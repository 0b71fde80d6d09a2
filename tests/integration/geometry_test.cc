// No silent loss on a geometry change (issue 26, item 4): an NVMe tier
// formatted for one geometry is not wiped by a start that asks for another.
// That start is refused (exit 2: systemd's RestartPreventExitStatus stops
// there) naming both geometries, the pages at stake and the way out, and
// touches nothing: the old geometry finds every page again. With
// --reformat_nvme it starts and logs how many pages it dropped.
#include <string>
#include <vector>

#include "client/wire_calls.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr size_t kPages = 6;

absl::StatusOr<std::unique_ptr<DaemonProcess>> StartOn(const std::string& state,
                                                       std::vector<std::string> more = {}) {
  DaemonOptions o;
  o.nvme = true;
  o.flags = {"--state_dir=" + state, "--prefetch_lookahead=false", "--log_level=info"};
  o.flags.insert(o.flags.end(), more.begin(), more.end());
  return DaemonProcess::Start(o);
}

uint64_t NvmePages(Client& c) {
  auto stats = WireStats(c);
  EXPECT_TRUE(stats.ok()) << stats.status();
  const wire::TierStats* t = stats.ok() ? FindTier(*stats, "nvme") : nullptr;
  return t == nullptr ? 0 : t->pages();
}

TEST(GeometryTest, AnotherGeometryIsRefusedUnlessTheOperatorAsksToReformat) {
  TempDir dir;
  const std::string state = dir.File("state");
  const std::vector<PageKey> keys = MakeChain(SmallLayout(), 264, kPages);
  {
    auto d = StartOn(state);
    if (!d.ok() && absl::StrContains(d.status().message(), "O_DIRECT"))
      GTEST_SKIP() << "no O_DIRECT under /tmp: " << d.status();
    ASSERT_TRUE(d.ok()) << d.status();
    auto c = ConnectClient((*d)->endpoint());
    ASSERT_TRUE(c);
    std::vector<std::string> pages;
    for (const PageKey& k : keys) pages.push_back(PatternPage(k, kPage));
    const std::vector<absl::string_view> views(pages.begin(), pages.end());
    auto put = c->PutInline(keys, PageKey::Zero(), views);
    ASSERT_TRUE(put.ok()) << put.status();
    ASSERT_EQ(put->stored, kPages);
    auto flushed = c->Flush();  // every page durable on NVMe
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    ASSERT_EQ(NvmePages(*c), kPages);
    c.reset();
    auto code = (*d)->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0);
  }

  // Slabs of 2 MiB instead of 1: refused, exit 2, nothing touched.
  CommandResult refused =
      RunCommand({KVTIERD_PATH, "--state_dir=" + state, "--socket=" + dir.File("r.sock"),
                  "--host_bytes=64MiB", "--host_slab_bytes=2MiB", "--hugepages=off",
                  "--nvme_bytes=64MiB", "--copy_threads=1"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  const std::string says = refused.out + refused.err;
  for (const std::string& part :
       {std::string("6 page(s)"), std::string("capacity 64 MiB, slabs of 1 MiB"),
        std::string("capacity 64 MiB, slabs of 2 MiB"), std::string("--reformat_nvme"),
        std::string("--host_slab_bytes"), state + "/nvme"})
    EXPECT_TRUE(absl::StrContains(says, part)) << "missing '" << part << "' in:\n" << says;

  // The old geometry finds every page, byte for byte.
  {
    auto d = StartOn(state);
    ASSERT_TRUE(d.ok()) << d.status();
    auto c = ConnectClient((*d)->endpoint());
    ASSERT_TRUE(c);
    EXPECT_EQ(NvmePages(*c), kPages) << "the refused start lost pages";
    auto got = c->GetInline(keys);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < kPages; ++i) EXPECT_EQ((*got)[i], PatternPage(keys[i], kPage)) << i;
    c.reset();
    ASSERT_TRUE((*d)->Stop().ok());
  }

  // Asked for: it starts in the new geometry and says what it dropped.
  auto d = StartOn(state, {"--host_slab_bytes=2MiB", "--reformat_nvme"});
  ASSERT_TRUE(d.ok()) << d.status();
  auto c = ConnectClient((*d)->endpoint());
  ASSERT_TRUE(c);
  EXPECT_EQ(NvmePages(*c), 0u);
  const std::string log = (*d)->Log();
  EXPECT_TRUE(absl::StrContains(log, "dropped 6 page(s)")) << log;
  EXPECT_TRUE(absl::StrContains(log, "slabs of 1 MiB to capacity 64 MiB, slabs of 2 MiB")) << log;
  c.reset();
  auto code = (*d)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace kvtier::itest
