// Registration warm-up against a real kvtierd: after REGISTER_BUFFER the
// daemon maps in the client's pages off the frontend (STATS warmup figures,
// and the Rss of the daemon's mapping in /proc/<pid>/smaps); UNREGISTER and
// session end stop it; holes and truncated objects are survived untouched; a
// GET before it writes through the buffer's descriptor.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "client/wire_calls.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/shm_buffer.h"
#include "tests/common/hugetlb_reserve.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Rss of `pid`'s mapping of the shm object `name` ("/x" shows as
// /dev/shm/x); ~0 when it has none.
uint64_t MappingRss(pid_t pid, const std::string& name) {
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  const std::string suffix = " /dev/shm" + name;
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.size() >= suffix.size() && line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0)
      in = true;
    else if (in && line.rfind("Rss:", 0) == 0)
      return std::stoull(line.substr(4)) * 1024;
  }
  return ~0ull;
}

class WarmupTest : public DaemonTest {
 protected:
  // The default tenant's warm-up figures.
  wire::BufferWarmup Warmup(Client& c) {
    auto st = WireStats(c);
    EXPECT_TRUE(st.ok()) << st.status();
    if (st.ok())
      for (const auto& n : st->namespaces())
        if (n.name() == "default") return n.warmup();
    ADD_FAILURE() << "no namespace 'default' in STATS";
    return {};
  }
  // Waits (up to 60 s: the warm-up runs at low priority on a loaded
  // machine) until no registration of the tenant is pending; returns the
  // figures then.
  wire::BufferWarmup WaitWarm(Client& c) {
    wire::BufferWarmup w = Warmup(c);
    for (int i = 0; i < 6000 && w.pending_bytes() > 0; ++i) {
      usleep(10000);
      w = Warmup(c);
    }
    EXPECT_EQ(w.pending_bytes(), 0u) << "warm-up did not finish in 60 s";
    return w;
  }
  // A client-written shm buffer (every page exists in the object).
  std::unique_ptr<ShmBuffer> Written(uint64_t size) {
    auto b = ShmBuffer::Create(size);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    std::memset((*b)->data(), 0x5a, size);
    return *std::move(b);
  }
};

TEST_F(WarmupTest, RegisteredBufferIsMappedInAndServesGets) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = Written(32 * kMiB);
  ASSERT_TRUE(buf);
  auto id = c->RegisterBuffer(buf->name(), buf->size());
  ASSERT_TRUE(id.ok()) << id.status();
  const wire::BufferWarmup w = WaitWarm(*c);
  EXPECT_EQ(w.warmed_bytes(), 32 * kMiB);
  EXPECT_EQ(w.buffers(), 1u);
  EXPECT_EQ(w.cancelled() + w.failed(), 0u);
  EXPECT_EQ(MappingRss(daemon_->pid(), buf->name()), 32 * kMiB);
  // The warmed mapping carries GETs byte-exact (the warm-up only reads).
  auto keys = MakeChain(SmallLayout(), 77, 8);
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < keys.size(); ++i) {
    offsets.push_back(i * kSmallPageBytes);
    tools::FillPattern(keys[i], buf->data() + offsets.back(), kSmallPageBytes);
  }
  auto put = c->Put(keys, PageKey::Zero(), *id, offsets);
  ASSERT_TRUE(put.ok()) << put.status();
  std::memset(buf->data(), 0, 8 * kSmallPageBytes);
  auto got = c->Get(keys, *id, offsets);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(tools::CheckPattern(keys[i], buf->data() + offsets[i], kSmallPageBytes),
              kSmallPageBytes);
}

TEST_F(WarmupTest, UnregisterLeavesNothingPending) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = Written(128 * kMiB);
  ASSERT_TRUE(buf);
  auto id = c->RegisterBuffer(buf->name(), buf->size());
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(c->UnregisterBuffer(*id).ok());
  // Whether it finished or was cut short, nothing of it is pending any more.
  const wire::BufferWarmup w = Warmup(*c);
  EXPECT_EQ(w.pending_bytes(), 0u);
  EXPECT_EQ(w.cancelled() + w.buffers(), 1u);
  EXPECT_LE(w.warmed_bytes(), 128 * kMiB);
}

TEST_F(WarmupTest, SessionEndStopsTheWarmUp) {
  auto watcher = Connect();
  ASSERT_TRUE(watcher);
  auto buf = Written(128 * kMiB);
  ASSERT_TRUE(buf);
  {
    auto c = Connect();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->RegisterBuffer(buf->name(), buf->size()).ok());
  }  // BYE: the session and its registration end
  const wire::BufferWarmup w = WaitWarm(*watcher);
  EXPECT_EQ(w.cancelled() + w.buffers(), 1u);
  EXPECT_EQ(MappingRss(daemon_->pid(), buf->name()), ~0ull) << "the daemon still maps it";
}

TEST_F(WarmupTest, HolesOfASparseObjectAreNotAllocated) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = ShmBuffer::Create(1ull << 30);  // sparse: the client wrote one page
  ASSERT_TRUE(buf.ok()) << buf.status();
  std::memset((*buf)->data(), 1, 4096);
  ASSERT_TRUE(c->RegisterBuffer((*buf)->name(), (*buf)->size()).ok());
  const wire::BufferWarmup w = WaitWarm(*c);
  EXPECT_EQ(w.warmed_bytes(), 4096u);
  EXPECT_EQ(w.skipped_bytes(), (1ull << 30) - 4096);
  const int fd = shm_open((*buf)->name().c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  struct stat st = {};
  fstat(fd, &st);
  close(fd);
  EXPECT_EQ(static_cast<uint64_t>(st.st_blocks) * 512, 4096u) << "the daemon allocated holes";
}

TEST_F(WarmupTest, ObjectTruncatedDuringWarmUpIsSurvived) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = Written(64 * kMiB);
  ASSERT_TRUE(buf);
  ASSERT_TRUE(c->RegisterBuffer(buf->name(), buf->size()).ok());
  const int fd = shm_open(buf->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);  // under the warm-up, wherever it is
  close(fd);
  const wire::BufferWarmup w = WaitWarm(*c);
  EXPECT_EQ(w.buffers() + w.failed(), 1u);
  EXPECT_TRUE(daemon_->Alive());
  EXPECT_TRUE(c->Ping().ok());  // TearDown also checks it exits 0
}

TEST_F(WarmupTest, EachRegistrationIsWarmed) {
  // Two registrations of one object by one tenant: both warm, once each.
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = Written(8 * kMiB);
  ASSERT_TRUE(buf);
  ASSERT_TRUE(c->RegisterBuffer(buf->name(), buf->size()).ok());
  ASSERT_TRUE(c->RegisterBuffer(buf->name(), buf->size()).ok());
  const wire::BufferWarmup w = WaitWarm(*c);
  EXPECT_EQ(w.buffers(), 2u);
  EXPECT_EQ(w.warmed_bytes(), 16 * kMiB);
}

class WarmupOffTest : public WarmupTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.flags = {"--buffer_warmup=false"}}; }
};

TEST_F(WarmupOffTest, NothingIsMappedInAhead) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto buf = Written(8 * kMiB);
  ASSERT_TRUE(buf);
  ASSERT_TRUE(c->RegisterBuffer(buf->name(), buf->size()).ok());
  const wire::BufferWarmup w = Warmup(*c);
  EXPECT_EQ(w.pending_bytes() + w.warmed_bytes() + w.buffers(), 0u);
  EXPECT_EQ(MappingRss(daemon_->pid(), buf->name()), 0u);
}

// GETs into a buffer the daemon has not mapped in (no warm-up here, so none
// ever is): the pages go through the buffer's descriptor, land byte-exact,
// and leave the daemon's mapping cold; with --buffer_write_fd=false they
// fault it in, as before. `expect_rss`: the mapping's Rss after the GET.
void GetIntoColdBuffer(Client& c, pid_t daemon, uint64_t expect_rss) {
  auto keys = MakeChain(SmallLayout(), 78, 8);
  std::vector<uint64_t> offsets;
  auto src = ShmBuffer::Create(8 * kSmallPageBytes);
  ASSERT_TRUE(src.ok()) << src.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    offsets.push_back(i * kSmallPageBytes);
    tools::FillPattern(keys[i], (*src)->data() + offsets.back(), kSmallPageBytes);
  }
  auto sid = c.RegisterBuffer((*src)->name(), (*src)->size());
  ASSERT_TRUE(sid.ok()) << sid.status();
  auto put = c.Put(keys, PageKey::Zero(), *sid, offsets);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, keys.size());
  auto dst = ShmBuffer::Create(8 * kSmallPageBytes);
  ASSERT_TRUE(dst.ok()) << dst.status();
  std::memset((*dst)->data(), 0, (*dst)->size());
  auto did = c.RegisterBuffer((*dst)->name(), (*dst)->size());
  ASSERT_TRUE(did.ok()) << did.status();
  auto got = c.Get(keys, *did, offsets);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(tools::CheckPattern(keys[i], (*dst)->data() + offsets[i], kSmallPageBytes),
              kSmallPageBytes);
  EXPECT_EQ(MappingRss(daemon, (*dst)->name()), expect_rss);
}

TEST_F(WarmupOffTest, GetIntoAColdBufferWritesThroughItsDescriptor) {
  auto c = Connect();
  ASSERT_TRUE(c);
  GetIntoColdBuffer(*c, daemon_->pid(), 0);
}

class WriteFdOffTest : public WarmupTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--buffer_warmup=false", "--buffer_write_fd=false"}};
  }
};

TEST_F(WriteFdOffTest, GetIntoAColdBufferFaultsTheMappingIn) {
  auto c = Connect();
  ASSERT_TRUE(c);
  GetIntoColdBuffer(*c, daemon_->pid(), 8 * kSmallPageBytes);
}

class WarmupDeviceTest : public WarmupTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--hbm_device=emulated", "--hbm_bytes=8MiB"}};
  }
};

TEST_F(WarmupDeviceTest, EmulatedDeviceBufferIsWarmedToo) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto arena = GpuArena::Create(16 * kMiB, ArenaKind::kEmulatedDevice);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::vector<uint8_t> bytes(16 * kMiB, 3);
  ASSERT_TRUE((*arena)->Write(0, bytes.data(), bytes.size()).ok());
  ASSERT_TRUE((*arena)->Register(*c).ok());
  const wire::BufferWarmup w = WaitWarm(*c);
  EXPECT_EQ(w.warmed_bytes(), 16 * kMiB);
  EXPECT_EQ(w.buffers(), 1u);
}

// An arena on 2 MiB hugetlb pages (ShmBuffer HugePages::kOn, what the
// decoder's arena takes when the machine has them): an unnamed memfd, so
// registered by descriptor; its size need not be whole hugetlb pages; GETs
// land byte-exact before and after the warm-up, and a range past the
// registered size is refused although the object goes on to its 2 MiB end.
TEST_F(WarmupTest, HugetlbArenaRegistersByDescriptorAndServesGets) {
  kvtier::testing::HugetlbReserve reserve(16);
  if (!reserve.ok()) GTEST_SKIP() << reserve.why();
  auto c = Connect();
  ASSERT_TRUE(c);
  const uint64_t size = 5 * kMiB + 4096;
  auto buf = ShmBuffer::Create(size, "", HugePages::kOn);
  // Tests run in parallel: a daemon's host tier (--hugepages=auto) or a
  // decoder's arena may take the pages reserved here first.
  if (!buf.ok() && absl::IsResourceExhausted(buf.status()) &&
      kvtier::testing::HugetlbReserve::Free() < 3)
    GTEST_SKIP() << "another process took the reserved hugetlb pages: " << buf.status();
  ASSERT_TRUE(buf.ok()) << buf.status();
  ASSERT_TRUE((*buf)->huge_pages());
  EXPECT_EQ((*buf)->size(), size);
  EXPECT_TRUE((*buf)->name().empty());
  auto id = c->RegisterBuffer(**buf);
  ASSERT_TRUE(id.ok()) << id.status();
  auto keys = MakeChain(SmallLayout(), 91, 8);
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < keys.size(); ++i) {
    offsets.push_back(size - (keys.size() - i) * kSmallPageBytes);  // the last pages
    tools::FillPattern(keys[i], (*buf)->data() + offsets.back(), kSmallPageBytes);
  }
  ASSERT_TRUE(c->Put(keys, PageKey::Zero(), *id, offsets).ok());
  for (int round = 0; round < 2; ++round) {  // at once, then once warm
    if (round == 1) {
      const wire::BufferWarmup w = WaitWarm(*c);
      EXPECT_EQ(w.failed(), 0u);
    }
    std::memset((*buf)->data() + offsets[0], 0, keys.size() * kSmallPageBytes);
    auto got = c->Get(keys, *id, offsets);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < keys.size(); ++i)
      EXPECT_EQ(tools::CheckPattern(keys[i], (*buf)->data() + offsets[i], kSmallPageBytes),
                kSmallPageBytes)
          << "round " << round << ", page " << i;
  }
  auto past = c->Get({keys[0]}, *id, {size - kSmallPageBytes + 4096});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange) << past.status();
}

}  // namespace
}  // namespace kvtier::itest
