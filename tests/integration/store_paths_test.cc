// The store's promises through a real kvtierd (issue 11): the frontend thread
// never does disk I/O — measured from outside, in the kernel's per-thread
// I/O accounting of the daemon's main thread (the frontend), and by the
// daemon's own `frontend_io` counter — while a tenant PUTs over its host
// quota, PUTs into a full RAM tier, GETs (inline and through a buffer) pages
// that sit on NVMe with RAM full, and DELETEs NVMe pages; and pages that were
// flushed to NVMe, then promoted by LOOKUP lookahead, survive a clean restart.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "client/wire_calls.h"
#include "absl/strings/str_cat.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;

// write_bytes and wchar of one thread (/proc/PID/task/TID/io), or nullopt
// where the kernel does not expose them.
struct ThreadIo {
  uint64_t write_bytes = 0, read_bytes = 0;
};
std::optional<ThreadIo> ReadThreadIo(pid_t pid, pid_t tid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/task/", tid, "/io"));
  if (!in) return std::nullopt;
  ThreadIo io;
  std::string name;
  uint64_t value;
  bool any = false;
  while (in >> name >> value) {
    if (name == "write_bytes:") io.write_bytes = value, any = true;
    if (name == "read_bytes:") io.read_bytes = value;
  }
  if (!any) return std::nullopt;
  return io;
}

class StorePathsTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    DaemonOptions o;
    o.nvme = true;
    o.tcp = true;
    // 16 pages of RAM; tenant "q" may hold 4 of them.
    o.flags = {"--host_bytes=1MiB", "--host_slab_bytes=1MiB", "--log_level=warn"};
    o.tenants_json = R"({"tenants": [
      {"name": "a", "token": "token-a-123", "admin": true},
      {"name": "q", "token": "token-q-123", "quota": {"host": "256KiB", "nvme": "16MiB"}}]})";
    return o;
  }
  std::string ProbeTenant() const override { return "a"; }
  std::string ProbeToken() const override { return "token-a-123"; }

  // PUTs chain `seed` of n pages through `buf` (PatternPage bytes).
  PutResult PutChain(Client& c, ShmBuffer& buf, BufferId id, const std::vector<PageKey>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string page = PatternPage(keys[i], kPage);
      std::memcpy(buf.data() + i * kPage, page.data(), kPage);
    }
    auto r = c.Put(keys, PageKey::Zero(), id, Offsets(keys.size()));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : PutResult{};
  }
};

TEST_F(StorePathsTest, FrontendThreadDoesNoDiskIo) {
  auto a = Connect("a", "token-a-123");
  auto q = Connect("q", "token-q-123");
  auto remote = ConnectTo(daemon_->tcp_endpoint(), "a", "token-a-123");
  ASSERT_TRUE(a && q && remote);
  auto buf = ShmBuffer::Create(32 * kPage);
  ASSERT_TRUE(buf.ok());
  auto ida = a->RegisterBuffer((*buf)->name(), (*buf)->size());
  auto idq = q->RegisterBuffer((*buf)->name(), (*buf)->size());
  // Registering is a mapping, done before the measurement.
  ASSERT_TRUE(ida.ok() && !idq.ok());  // another tenant's registered object is refused
  auto buf_q = ShmBuffer::Create(32 * kPage);
  ASSERT_TRUE(buf_q.ok());
  idq = q->RegisterBuffer((*buf_q)->name(), (*buf_q)->size());
  ASSERT_TRUE(idq.ok()) << idq.status();

  const pid_t pid = daemon_->pid();
  const std::optional<ThreadIo> before = ReadThreadIo(pid, pid);

  // Tenant "q" PUTs 12 pages over its 4-page host quota (its NVMe quota is
  // set: a host quota alone would bound NVMe too).
  std::vector<PageKey> qkeys = MakeChain(SmallLayout(), 1, 12);
  PutResult pq = PutChain(*q, **buf_q, *idq, qkeys);
  EXPECT_EQ(pq.stored, 12u) << "over-quota pages land on NVMe";
  // Tenant "a" fills RAM and more: 28 pages into 16 pages of RAM.
  std::vector<PageKey> akeys = MakeChain(SmallLayout(), 2, 28);
  PutResult pa = PutChain(*a, **buf, *ida, akeys);
  EXPECT_EQ(pa.stored, 28u);
  // GETs of pages on NVMe with RAM full: through the buffer and inline.
  auto got = a->Get(akeys, *ida, Offsets(akeys.size()));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < akeys.size(); ++i) {
    ASSERT_NE((*got)[i], TierKind::kNone) << i;
    ASSERT_EQ(std::string(reinterpret_cast<const char*>((*buf)->data()) + i * kPage, kPage),
              PatternPage(akeys[i], kPage))
        << "page " << i;
  }
  // One page per GET: small enough for the frontend to copy itself when the
  // page is in RAM (--frontend_copy_bytes), and never when it is on NVMe.
  std::memset((*buf)->data(), 0, akeys.size() * kPage);
  for (size_t i = 0; i < akeys.size(); ++i) {
    auto one = a->Get({akeys[i]}, *ida, {i * kPage});
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_NE((*one)[0], TierKind::kNone) << i;
    ASSERT_EQ(std::string(reinterpret_cast<const char*>((*buf)->data()) + i * kPage, kPage),
              PatternPage(akeys[i], kPage))
        << "single page " << i;
  }
  // One page per PUT as well: the frontend fills it itself when its slot is
  // in RAM, and a copy worker does when it needs a checksum (NVMe).
  std::vector<PageKey> single = MakeChain(SmallLayout(), 3, 6);
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string page = PatternPage(single[i], kPage);
    std::memcpy((*buf)->data(), page.data(), kPage);
    auto r = a->Put({single[i]}, i == 0 ? PageKey::Zero() : single[i - 1], *ida, {0});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->stored, 1u) << "single page " << i;
  }
  auto single_pages = remote->GetInline(single);
  ASSERT_TRUE(single_pages.ok()) << single_pages.status();
  for (size_t i = 0; i < single.size(); ++i)
    ASSERT_EQ((*single_pages)[i], PatternPage(single[i], kPage)) << "single PUT " << i;
  auto inline_pages = remote->GetInline(akeys);
  ASSERT_TRUE(inline_pages.ok()) << inline_pages.status();
  for (size_t i = 0; i < akeys.size(); ++i)
    ASSERT_EQ((*inline_pages)[i], PatternPage(akeys[i], kPage)) << "inline page " << i;
  auto qgot = q->GetInline(qkeys);
  ASSERT_TRUE(qgot.ok());
  for (size_t i = 0; i < qkeys.size(); ++i)
    ASSERT_EQ((*qgot)[i], PatternPage(qkeys[i], kPage)) << "q page " << i;
  // LOOKUP (its lookahead promotes on the prefetcher's threads) and DELETE.
  ASSERT_TRUE(a->Lookup(akeys).ok());
  auto deleted = q->Delete(qkeys);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 12u);

  auto stats = WireStats(*a);
  ASSERT_TRUE(stats.ok());
  const wire::TierStats* nvme = FindTier(*stats, "nvme");
  ASSERT_NE(nvme, nullptr);
  EXPECT_GT(nvme->pages() + nvme->bytes_in(), 0u) << "the test never reached NVMe";
  for (const auto& t : stats->tiers()) EXPECT_EQ(t.frontend_io(), 0u) << t.name();

  const std::optional<ThreadIo> after = ReadThreadIo(pid, pid);
  if (!before || !after) GTEST_SKIP() << "no per-thread I/O accounting in /proc here";
  EXPECT_EQ(after->write_bytes - before->write_bytes, 0u)
      << "the frontend thread caused disk writes";
  EXPECT_EQ(after->read_bytes - before->read_bytes, 0u) << "the frontend thread read the disk";
}

// Issue 11, item 4, end to end: pages FLUSHed to NVMe, then looked up (the
// lookahead promotes them), survive SIGTERM and a restart.
TEST_F(StorePathsTest, FlushedPagesSurviveLookaheadAndACleanRestart) {
  auto a = Connect("a", "token-a-123");
  ASSERT_TRUE(a);
  auto buf = ShmBuffer::Create(8 * kPage);
  ASSERT_TRUE(buf.ok());
  auto id = a->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok());
  std::vector<PageKey> keys = MakeChain(SmallLayout(), 3, 4);
  ASSERT_EQ(PutChain(*a, **buf, *id, keys).stored, 4u);
  ASSERT_TRUE(a->Flush().ok());
  auto found = a->Lookup(keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hits, 4u);
  // Wait until the lookahead has promoted them back to RAM.
  for (int i = 0; i < 200; ++i) {
    auto s = WireStats(*a);
    ASSERT_TRUE(s.ok());
    if (FindTier(*s, "host")->pages() == 4) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  a.reset();
  ASSERT_TRUE(daemon_->Restart().ok());
  a = Connect("a", "token-a-123");
  ASSERT_TRUE(a);
  auto pages = a->GetInline(keys);
  ASSERT_TRUE(pages.ok()) << pages.status();
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ((*pages)[i], PatternPage(keys[i], kPage)) << "page " << i << " lost";
}

}  // namespace
}  // namespace kvtier::itest
