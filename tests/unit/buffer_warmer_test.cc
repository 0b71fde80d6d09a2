// BufferWarmer in isolation (daemon/buffer_warmer.h), stepped by hand
// (threads = 0) over real shm objects: what it maps in (the daemon mapping's
// Rss in /proc/self/smaps), what it leaves alone (holes), cancellation,
// round-robin between tenants, and objects truncated under it; and
// ClientBuffer::Write, which copies through the object's descriptor until the
// warm-up has mapped a range in.
#include "daemon/buffer_warmer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon/client_buffer.h"
#include "gtest/gtest.h"
#include "kvtier/test_hooks.h"
#include "tests/common/hugetlb_reserve.h"

namespace kvtier::daemon {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A shm object the test owns (the client's side): created sparse, written
// where asked through the test's own mapping, unlinked at the end.
class Object {
 public:
  explicit Object(uint64_t size) : size_(size) {
    static std::atomic<int> seq{0};
    name_ = "/kvtier-warm-test-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(size)) != 0) fd_ = -1;
  }
  ~Object() {
    if (fd_ >= 0) close(fd_);
    shm_unlink(name_.c_str());
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  uint64_t Size() const {
    struct stat st = {};
    fstat(fd_, &st);
    return static_cast<uint64_t>(st.st_size);
  }
  std::string Read(uint64_t offset, uint64_t n) const {
    std::string out(n, '\0');
    EXPECT_EQ(pread(fd_, out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
    return out;
  }
  // Writes [offset, offset + n) so the object holds those pages.
  void Write(uint64_t offset, uint64_t n) {
    ASSERT_EQ(pwrite(fd_, std::string(n, 'x').data(), n, static_cast<off_t>(offset)),
              static_cast<ssize_t>(n));
  }
  void Truncate(uint64_t size) { ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }
  uint64_t AllocatedBytes() const {
    struct stat st = {};
    fstat(fd_, &st);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t size_;
};

// Rss of this process's mapping that starts at `addr` (/proc/self/smaps).
uint64_t MappingRss(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  char start[32];
  std::snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(addr));
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.rfind(start, 0) == 0) in = true;
    else if (in && line.rfind("Rss:", 0) == 0) return std::stoull(line.substr(4)) * 1024;
  }
  return ~0ull;
}

std::shared_ptr<ClientBuffer> Map(const Object& o, uint64_t size) {
  auto b = ClientBuffer::Map(o.name(), size);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : nullptr;
}

std::unique_ptr<BufferWarmer> Stepped(BufferWarmerConfig c = {}) {
  c.threads = 0;
  auto w = BufferWarmer::Create(c);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

int StepAll(BufferWarmer& w) {
  int steps = 0;
  while (w.Step()) ++steps;
  return steps;
}

TEST(BufferWarmerTest, MapsInEveryPageTheObjectHolds) {
  Object o(8 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 8 * kMiB);
  auto buffer = Map(o, 8 * kMiB);
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(MappingRss(buffer->data()), 0u) << "mapping is populated before any warm-up";
  auto w = Stepped();
  w->Warm(7, buffer);
  EXPECT_EQ(w->Stats(7).pending_bytes, 8 * kMiB);
  EXPECT_EQ(StepAll(*w), 8);  // 1 MiB chunks
  const WarmStats s = w->Stats(7);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.warmed_bytes, 8 * kMiB);
  EXPECT_EQ(s.skipped_bytes, 0u);
  EXPECT_EQ(s.buffers, 1u);
  EXPECT_EQ(MappingRss(buffer->data()), 8 * kMiB);
}

TEST(BufferWarmerTest, LeavesHolesAlone) {
  Object o(64 * kMiB);  // sparse: the client wrote 1 MiB and one page
  ASSERT_TRUE(o.ok());
  o.Write(0, kMiB);
  o.Write(40 * kMiB, 4096);
  auto buffer = Map(o, 64 * kMiB);
  ASSERT_NE(buffer, nullptr);
  auto w = Stepped();
  w->Warm(1, buffer);
  StepAll(*w);
  const WarmStats s = w->Stats(1);
  EXPECT_EQ(s.warmed_bytes, kMiB + 4096);
  EXPECT_EQ(s.skipped_bytes, 63 * kMiB - 4096);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(o.AllocatedBytes(), kMiB + 4096) << "warm-up allocated the object's holes";
}

TEST(BufferWarmerTest, UnregisterCancelsTheRest) {
  Object o(8 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 8 * kMiB);
  auto buffer = Map(o, 8 * kMiB);
  auto w = Stepped();
  w->Warm(1, buffer);
  ASSERT_TRUE(w->Step());
  w->Cancel(1, buffer.get());
  EXPECT_FALSE(w->Step()) << "a cancelled buffer is still queued";
  const WarmStats s = w->Stats(1);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.warmed_bytes, kMiB);
  EXPECT_EQ(MappingRss(buffer->data()), kMiB);
}

TEST(BufferWarmerTest, EndedRegistrationIsDroppedAtItsNextChunk) {
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto w = Stepped();
  auto buffer = Map(o, 4 * kMiB);
  w->Warm(1, buffer);
  ASSERT_TRUE(w->Step());
  buffer.reset();  // session ended: the warmer held it weakly
  EXPECT_TRUE(w->Step());
  EXPECT_FALSE(w->Step());
  const WarmStats s = w->Stats(1);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.warmed_bytes, kMiB);
}

TEST(BufferWarmerTest, EndedRegistrationLeavesPendingAtOnce) {
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  auto w = Stepped();
  auto buffer = Map(o, 4 * kMiB);
  w->Warm(1, buffer);
  buffer.reset();
  EXPECT_EQ(w->Stats(1).pending_bytes, 0u);
  EXPECT_EQ(w->Stats(1).cancelled, 1u);
  EXPECT_FALSE(w->Step());
}

TEST(BufferWarmerTest, TenantsTakeTurnsChunkByChunk) {
  Object big(16 * kMiB), small(kMiB);
  ASSERT_TRUE(big.ok() && small.ok());
  big.Write(0, 16 * kMiB);
  small.Write(0, kMiB);
  auto w = Stepped();
  auto a = Map(big, 16 * kMiB);
  auto b = Map(small, kMiB);
  w->Warm(1, a);  // tenant 1 first, with 16 chunks
  w->Warm(2, b);
  ASSERT_TRUE(w->Step());
  ASSERT_TRUE(w->Step());
  EXPECT_EQ(w->Stats(2).buffers, 1u) << "tenant 2 waited behind tenant 1's whole buffer";
  EXPECT_EQ(w->Stats(1).warmed_bytes, kMiB);
  StepAll(*w);
  EXPECT_EQ(w->Stats(1).buffers, 1u);
}

TEST(BufferWarmerTest, DisabledDoesNothing) {
  Object o(kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, kMiB);
  auto buffer = Map(o, kMiB);
  BufferWarmerConfig c;
  c.enabled = false;
  auto w = Stepped(c);
  w->Warm(1, buffer);
  EXPECT_FALSE(w->Step());
  EXPECT_EQ(w->Stats(1).pending_bytes, 0u);
  EXPECT_EQ(MappingRss(buffer->data()), 0u);
}

TEST(BufferWarmerTest, ConfigIsValidated) {
  BufferWarmerConfig c;
  c.chunk_bytes = 1000;
  EXPECT_FALSE(BufferWarmer::Create(c).ok());
  c = {};
  c.threads = -1;
  EXPECT_FALSE(BufferWarmer::Create(c).ok());
}

TEST(BufferWarmerTest, ObjectTruncatedBeforeWarmUpIsSkipped) {
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto buffer = Map(o, 4 * kMiB);
  auto w = Stepped();
  w->Warm(1, buffer);
  o.Truncate(0);
  StepAll(*w);
  EXPECT_EQ(w->Stats(1).skipped_bytes, 4 * kMiB);
  EXPECT_EQ(w->Stats(1).warmed_bytes, 0u);
}

// The race the residency check cannot close: the client truncates the object
// between the check and the touch. madvise then fails with EFAULT, or the
// touch raises SIGBUS inside the guard; either way the warm-up stops.
class TruncatedDuringWarmUp : public ::testing::TestWithParam<bool> {};

TEST_P(TruncatedDuringWarmUp, StopsWithoutCrashing) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "needs KVTIER_TEST_HOOKS (sync points)";
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto buffer = Map(o, 4 * kMiB);
  BufferWarmerConfig c;
  c.use_populate = GetParam();
  auto w = Stepped(c);
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("buffer_warmer.after_residency", [&](void*) { o.Truncate(0); });
  sp.EnableProcessing();
  w->Warm(1, buffer);
  const int steps = StepAll(*w);
  sp.DisableProcessing();
  sp.ClearAll();
  EXPECT_EQ(steps, 1);
  const WarmStats s = w->Stats(1);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.warmed_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(PopulateAndTouchOnly, TruncatedDuringWarmUp, ::testing::Bool());

TEST(BufferWarmerTest, CancelDuringAChunkDropsTheJobAfterIt) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "needs KVTIER_TEST_HOOKS (sync points)";
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto buffer = Map(o, 4 * kMiB);
  auto w = Stepped();
  auto& sp = test_hooks::SyncPoints::Get();
  sp.SetCallback("buffer_warmer.after_residency", [&](void*) { w->Cancel(1, buffer.get()); });
  sp.EnableProcessing();
  w->Warm(1, buffer);
  EXPECT_TRUE(w->Step());
  sp.DisableProcessing();
  sp.ClearAll();
  EXPECT_FALSE(w->Step());
  const WarmStats s = w->Stats(1);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.pending_bytes, 0u);
  EXPECT_EQ(s.buffers, 0u);
}

TEST(BufferWarmerTest, ThreadsWarmInTheBackground) {
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto buffer = Map(o, 4 * kMiB);
  auto w = BufferWarmer::Create({});
  ASSERT_TRUE(w.ok());
  (*w)->Warm(3, buffer);
  // Waits for the outcome (bounded), then checks it: not a timing assertion.
  for (int i = 0; i < 30000 && (*w)->Stats(3).pending_bytes > 0; ++i) usleep(1000);
  EXPECT_EQ((*w)->Stats(3).buffers, 1u);
  EXPECT_EQ(MappingRss(buffer->data()), 4 * kMiB);
}

std::string Pattern(uint64_t n, char seed) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

bool WriteAt(ClientBuffer& b, uint64_t offset, const std::string& bytes) {
  return b.Write(offset, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A GET into a cold buffer: the bytes land, the daemon's mapping stays
// untouched (no fault per page), and nothing beyond the range is allocated.
TEST(ClientBufferWriteTest, ColdRangeGoesThroughTheDescriptor) {
  Object o(64 * kMiB);  // sparse: the client wrote its first 8 MiB
  ASSERT_TRUE(o.ok());
  o.Write(0, 8 * kMiB);
  auto buffer = Map(o, 64 * kMiB);
  ASSERT_NE(buffer, nullptr);
  ASSERT_TRUE(buffer->writes_through_fd());
  const std::string page = Pattern(3 * kMiB, 'a');
  ASSERT_TRUE(WriteAt(*buffer, kMiB + 4096, page));
  EXPECT_EQ(o.Read(kMiB + 4096, page.size()), page);
  EXPECT_EQ(MappingRss(buffer->data()), 0u) << "the copy faulted the daemon's mapping in";
  ASSERT_TRUE(WriteAt(*buffer, 40 * kMiB, page));  // into a hole, as a copy would
  EXPECT_EQ(o.Read(40 * kMiB, page.size()), page);
  EXPECT_EQ(o.AllocatedBytes(), 8 * kMiB + 3 * kMiB) << "a write allocated beyond its range";
  EXPECT_EQ(o.Size(), 64 * kMiB);
}

// Below the warm-up's mark a copy uses the mapping (the fast path once warm);
// above it, the descriptor.
TEST(ClientBufferWriteTest, WarmRangeGoesThroughTheMapping) {
  Object o(4 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 4 * kMiB);
  auto buffer = Map(o, 4 * kMiB);
  ASSERT_NE(buffer, nullptr);
  auto w = Stepped();
  w->Warm(1, buffer);
  ASSERT_TRUE(w->Step());  // one 1 MiB chunk
  EXPECT_EQ(buffer->warm_bytes(), kMiB);
  EXPECT_EQ(MappingRss(buffer->data()), kMiB);
  const std::string a = Pattern(kMiB / 2, 'b'), b = Pattern(kMiB, 'c');
  ASSERT_TRUE(WriteAt(*buffer, 4096, a));
  ASSERT_TRUE(WriteAt(*buffer, 2 * kMiB, b));
  EXPECT_EQ(MappingRss(buffer->data()), kMiB) << "a cold range went through the mapping";
  EXPECT_EQ(o.Read(4096, a.size()), a);
  EXPECT_EQ(o.Read(2 * kMiB, b.size()), b);
  StepAll(*w);
  EXPECT_EQ(buffer->warm_bytes(), 4 * kMiB);
  // A range across the old mark is warm now, and goes through the mapping.
  ASSERT_TRUE(WriteAt(*buffer, kMiB - 4096, b));
  EXPECT_EQ(o.Read(kMiB - 4096, b.size()), b);
}

// A shrunk object refuses the copy as the mapping's SIGBUS would, and is
// not grown back by it.
TEST(ClientBufferWriteTest, ShrunkObjectFailsAndStaysShrunk) {
  Object o(8 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 8 * kMiB);
  auto buffer = Map(o, 8 * kMiB);
  ASSERT_NE(buffer, nullptr);
  o.Truncate(2 * kMiB);
  EXPECT_FALSE(WriteAt(*buffer, 4 * kMiB, Pattern(kMiB, 'd')));
  EXPECT_FALSE(WriteAt(*buffer, 2 * kMiB - 4096, Pattern(8192, 'e')));
  EXPECT_EQ(o.Size(), 2 * kMiB);
  ASSERT_TRUE(WriteAt(*buffer, kMiB, Pattern(kMiB, 'f')));  // what remains still works
  EXPECT_EQ(o.Read(kMiB, kMiB), Pattern(kMiB, 'f'));
}

// A buffer handed over by fd shares the client's open file: O_APPEND set on
// it by the client must not turn the daemon's writes into appends that grow
// the object.
TEST(ClientBufferWriteTest, ClientAppendFlagIsIgnored) {
  Object o(2 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 2 * kMiB);
  auto b = ClientBuffer::MapFd(o.fd(), 2 * kMiB, "handed");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(fcntl(o.fd(), F_SETFL, fcntl(o.fd(), F_GETFL) | O_APPEND), 0);
  const std::string page = Pattern(4096, 'g');
  ASSERT_TRUE(WriteAt(**b, 8192, page));
  EXPECT_EQ(o.Size(), 2 * kMiB);
  EXPECT_EQ(o.Read(8192, page.size()), page);
}

// With no descriptor to spare (--buffer_write_fd=false sets the limit to 0)
// copies use the mapping, as before.
TEST(ClientBufferWriteTest, WithoutADescriptorTheMappingIsUsed) {
  ClientBuffer::set_fd_limit(0);
  Object o(2 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 2 * kMiB);
  auto buffer = Map(o, 2 * kMiB);
  ClientBuffer::set_fd_limit(-1);
  ASSERT_NE(buffer, nullptr);
  EXPECT_FALSE(buffer->writes_through_fd());
  const std::string page = Pattern(kMiB, 'h');
  ASSERT_TRUE(WriteAt(*buffer, 0, page));
  EXPECT_EQ(MappingRss(buffer->data()), kMiB);
  EXPECT_EQ(o.Read(0, page.size()), page);
}

// A hugetlb object (an engine's arena on 2 MiB pages) maps as whole hugetlb
// pages (a mapping of any other length fails) and is copied into through the
// mapping, hugetlbfs having no write(). Its EINVAL from pwritev2 once read as
// "RWF_NOAPPEND unsupported" and turned the descriptor path off for every
// later buffer: a shm buffer mapped after it still writes through its own.
TEST(ClientBufferWriteTest, HugetlbObjectIsCopiedThroughTheMapping) {
  kvtier::testing::HugetlbReserve reserve(8);
  if (!reserve.ok()) GTEST_SKIP() << reserve.why();
  const int fd = memfd_create("kvtier-huge-test", MFD_HUGETLB | MFD_CLOEXEC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(ftruncate(fd, 4 * kMiB), 0) << strerror(errno);
  {
    auto b = ClientBuffer::MapFd(fd, 3 * kMiB + 4096, "hugetlb");  // not whole 2 MiB pages
    // Tests run in parallel: another process may take the pages reserved here.
    if (!b.ok() && absl::IsResourceExhausted(b.status()) &&
        kvtier::testing::HugetlbReserve::Free() < 2) {
      close(fd);
      GTEST_SKIP() << "another process took the reserved hugetlb pages: " << b.status();
    }
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_FALSE((*b)->writes_through_fd());
    const std::string bytes = Pattern(kMiB, 'i');
    ASSERT_TRUE(WriteAt(**b, 2 * kMiB + 4096, bytes));  // up to the registered end
    void* m = mmap(nullptr, 4 * kMiB, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(m, MAP_FAILED) << strerror(errno);
    EXPECT_EQ(std::string(static_cast<const char*>(m) + 2 * kMiB + 4096, bytes.size()), bytes);
    munmap(m, 4 * kMiB);
  }  // unmapped with the length it was mapped with
  close(fd);
  Object o(2 * kMiB);
  ASSERT_TRUE(o.ok());
  o.Write(0, 2 * kMiB);
  auto shm = Map(o, 2 * kMiB);
  ASSERT_NE(shm, nullptr);
  EXPECT_TRUE(shm->writes_through_fd()) << "the hugetlb buffer turned the descriptor path off";
}

}  // namespace
}  // namespace kvtier::daemon
