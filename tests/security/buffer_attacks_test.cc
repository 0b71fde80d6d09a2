// Attacks through REGISTER_BUFFER: aliasing another tenant's shared memory
// (hole 1, and hole 12 for emulated device buffers), and sparse objects that
// cost the daemon memory and stall its frontend (hole 4).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>

#include "kvtier/shm_buffer.h"
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

// A POSIX shm object the attacker made: created, sized, unlinked at the end.
class ShmObject {
 public:
  ShmObject(const std::string& tag, uint64_t size) {
    static std::atomic<int> seq{0};
    name_ = absl::StrCat("/kvtier-sec-", getpid(), "-", tag, "-", seq++);
    int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ok_ = fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) == 0;
    if (fd >= 0) close(fd);
  }
  ~ShmObject() { shm_unlink(name_.c_str()); }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  // Bytes the object really holds (st_blocks): a sparse object holds none.
  uint64_t AllocatedBytes() const {
    struct stat st = {};
    if (stat(("/dev/shm" + name_).c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

 private:
  std::string name_;
  bool ok_ = false;
};

// A second name for an existing shm object (a hard link in /dev/shm).
class ShmLink {
 public:
  explicit ShmLink(const std::string& target) {
    name_ = absl::StrCat("/kvtier-sec-link-", getpid(), "-", target.substr(1));
    ok_ = link(("/dev/shm" + target).c_str(), ("/dev/shm" + name_).c_str()) == 0;
  }
  ~ShmLink() { unlink(("/dev/shm" + name_).c_str()); }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool ok_ = false;
};

uint32_t BufferId(const absl::StatusOr<WireReply>& r) {
  return r.ok() ? r->response.register_buffer().buffer_id() : 0;
}

// ---------------------------------------------------------------- hole 1 --

class Hole01_BufferAliasing : public WithAlicePages<101> {};

TEST_F(Hole01_BufferAliasing, SecondRegistrationUnregisteredStillProtects) {
  auto x = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(x.ok()) << x.status();
  auto alice = Alice();
  ASSERT_TRUE(alice);
  auto id1 = alice->RegisterBuffer((*x)->name(), (*x)->size());
  auto id2 = alice->RegisterBuffer((*x)->name(), (*x)->size());
  ASSERT_TRUE(id1.ok() && id2.ok());
  ASSERT_NE(*id1, *id2);
  ASSERT_TRUE(alice->UnregisterBuffer(*id2).ok());
  // Alice still has X registered (id 1): it is hers.
  SCOPED_TRACE("mallory registers alice's shm object");
  auto mallory = Mallory();
  auto r = mallory->Call(RegisterShmReq((*x)->name(), (*x)->size()));
  EXPECT_WIRE_CODE(r, PERMISSION_DENIED);
  // Alice's buffer still works for her.
  auto got = alice->Get(keys_, *id1, {0, kPage, 2 * kPage, 3 * kPage});
  ASSERT_TRUE(got.ok()) << got.status();
}

TEST_F(Hole01_BufferAliasing, OneOfTwoSessionsSaysBye) {
  auto x = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(x.ok()) << x.status();
  auto a1 = Alice();
  auto a2 = Alice();
  ASSERT_TRUE(a1 && a2);
  ASSERT_TRUE(a1->RegisterBuffer((*x)->name(), (*x)->size()).ok());
  ASSERT_TRUE(a2->RegisterBuffer((*x)->name(), (*x)->size()).ok());
  a2.reset();  // BYE: session 1 still has X registered
  SCOPED_TRACE("mallory registers alice's shm object");
  auto mallory = Mallory();
  EXPECT_WIRE_CODE(mallory->Call(RegisterShmReq((*x)->name(), (*x)->size())), PERMISSION_DENIED);
}

TEST_F(Hole01_BufferAliasing, SecondNameOfTheSameObject) {
  auto x = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(x.ok()) << x.status();
  auto alice = Alice();
  ASSERT_TRUE(alice);
  ASSERT_TRUE(alice->RegisterBuffer((*x)->name(), (*x)->size()).ok());
  ShmLink y((*x)->name());
  ASSERT_TRUE(y.ok()) << "cannot hard-link in /dev/shm";
  SCOPED_TRACE("mallory registers a second name of alice's shm object");
  auto mallory = Mallory();
  EXPECT_WIRE_CODE(mallory->Call(RegisterShmReq(y.name(), (*x)->size())), PERMISSION_DENIED);
  // Also after alice registers it twice and drops one.
  auto again = alice->RegisterBuffer((*x)->name(), (*x)->size());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(alice->UnregisterBuffer(*again).ok());
  EXPECT_WIRE_CODE(mallory->Call(RegisterShmReq(y.name(), (*x)->size())), PERMISSION_DENIED);
}

TEST_F(Hole01_BufferAliasing, FreeOnceAliceLetsGoOfEveryRegistration) {
  auto x = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(x.ok()) << x.status();
  {
    auto a1 = Alice();
    auto a2 = Alice();
    ASSERT_TRUE(a1 && a2);
    auto i1 = a1->RegisterBuffer((*x)->name(), (*x)->size());
    auto i2 = a1->RegisterBuffer((*x)->name(), (*x)->size());
    ASSERT_TRUE(i1.ok() && i2.ok());
    ASSERT_TRUE(a2->RegisterBuffer((*x)->name(), (*x)->size()).ok());
    ASSERT_TRUE(a1->UnregisterBuffer(*i1).ok());
    ASSERT_TRUE(a1->UnregisterBuffer(*i2).ok());
  }  // both sessions BYE
  auto mallory = Mallory();
  auto r = mallory->Call(RegisterShmReq((*x)->name(), (*x)->size()));
  EXPECT_WIRE_CODE(r, OK);
  EXPECT_NE(BufferId(r), 0u);
}

// ---------------------------------------------------------------- hole 4 --

class Hole04_SparseRegistration : public SecurityTest {};

TEST_F(Hole04_SparseRegistration, TwoGiBSparseObjectRegisteredTwentyTimes) {
  ShmObject sparse("sparse", 2ull << 30);
  ASSERT_TRUE(sparse.ok());
  auto mallory = Mallory();
  const pid_t pid = daemon_->pid();
  const uint64_t rss0 = ProcStatusBytes(pid, "VmRSS");
  PeakSampler rss(pid, "VmRSS");
  VictimProbe victim(daemon_->endpoint(), kAlice, kAliceToken);
  ASSERT_TRUE(victim.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int registered = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = mallory->Call(RegisterShmReq(sparse.name(), 2ull << 30), {}, 30000);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->response.code() != wire::OK) continue;  // refusing it is fine too
    ++registered;
    EXPECT_WIRE_CODE(mallory->Call(UnregisterReq(BufferId(r)), {}, 30000), OK);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  LatencySummary ping = victim.Stop("sparse_registration");
  const uint64_t peak = rss.Stop();
  std::printf("SECURITY_MEM attack=sparse_registration registered=%d rss_before_mib=%.1f "
              "rss_peak_mib=%.1f shm_allocated_mib=%.1f\n",
              registered, rss0 / 1048576.0, peak / 1048576.0, sparse.AllocatedBytes() / 1048576.0);
  EXPECT_LE(ping.p99_ms, 20.0) << "the victim's PINGs stalled while mallory registered";
  EXPECT_EQ(ping.errors, 0u);
  EXPECT_LT(sparse.AllocatedBytes(), 64ull << 20)
      << "the daemon touched the attacker's sparse object (allocated its memory)";
  EXPECT_LT(peak - std::min(peak, rss0), 256ull << 20) << "the daemon's RSS grew with the object";
}

class Hole04_RegisteredBytesLimit : public SecurityTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--max_registered_bytes_per_tenant=1GiB"};
  }
};

TEST_F(Hole04_RegisteredBytesLimit, TenantLimitOnRegisteredBytes) {
  ShmObject sparse("limit", 2ull << 30);
  ASSERT_TRUE(sparse.ok());
  auto m1 = Mallory();
  auto r = m1->Call(RegisterShmReq(sparse.name(), 2ull << 30), {}, 30000);
  EXPECT_WIRE_CODE(r, RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(r->response.message(), "registered")) << r->response.message();
  // Within the limit: fine; the sum over the tenant's sessions counts.
  auto small = m1->Call(RegisterShmReq(sparse.name(), 600ull << 20), {}, 30000);
  EXPECT_WIRE_CODE(small, OK);
  auto m2 = Mallory();
  auto more = m2->Call(RegisterShmReq(sparse.name(), 600ull << 20), {}, 30000);
  EXPECT_WIRE_CODE(more, RESOURCE_EXHAUSTED);
  // Freed bytes can be registered again.
  EXPECT_WIRE_CODE(m1->Call(UnregisterReq(BufferId(small))), OK);
  EXPECT_WIRE_CODE(m2->Call(RegisterShmReq(sparse.name(), 600ull << 20), {}, 30000), OK);
  // Another tenant has its own budget.
  auto x = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(x.ok());
  auto alice = Alice();
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->RegisterBuffer((*x)->name(), (*x)->size()).ok());
}

// --------------------------------------------------------------- hole 12 --

class Hole12_DeviceBuffers : public SecurityTest {
 protected:
  std::vector<std::string> Flags() const override {
    return {"--hbm_device=emulated", "--hbm_bytes=8MiB"};
  }
};

TEST_F(Hole12_DeviceBuffers, AnotherTenantsDeviceBufferIsRefused) {
  auto d = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(d.ok()) << d.status();
  auto keys = itest::MakeChain(itest::SmallLayout(), 1201, 4);
  auto alice = Alice();
  ASSERT_TRUE(alice);
  ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, keys));
  auto id = alice->RegisterDeviceBuffer(DeviceBufferKind::kEmulated, (*d)->name(), 0, (*d)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  SCOPED_TRACE("mallory registers alice's device buffer");
  auto mallory = Mallory();
  EXPECT_WIRE_CODE(
      mallory->Call(RegisterDeviceReq(wire::BUFFER_EMULATED_DEVICE, (*d)->name(), (*d)->size())),
      PERMISSION_DENIED);
  // The same memory named as a plain shm buffer.
  EXPECT_WIRE_CODE(mallory->Call(RegisterShmReq((*d)->name(), (*d)->size())), PERMISSION_DENIED);
  // A second registration of alice's, dropped, leaves the first protecting it.
  auto id2 = alice->RegisterDeviceBuffer(DeviceBufferKind::kEmulated, (*d)->name(), 0, (*d)->size());
  ASSERT_TRUE(id2.ok()) << id2.status();
  ASSERT_TRUE(alice->UnregisterBuffer(*id2).ok());
  EXPECT_WIRE_CODE(
      mallory->Call(RegisterDeviceReq(wire::BUFFER_EMULATED_DEVICE, (*d)->name(), (*d)->size())),
      PERMISSION_DENIED);
  // Alice's GET into it still works.
  auto got = alice->Get(keys, *id, {0, kPage, 2 * kPage, 3 * kPage});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectAliceIntact(keys);
}

TEST_F(Hole12_DeviceBuffers, SizeLargerThanTheObjectIsRefused) {
  ShmObject own("dev", 1 << 20);
  ASSERT_TRUE(own.ok());
  auto mallory = Mallory();
  auto r = mallory->Call(RegisterDeviceReq(wire::BUFFER_EMULATED_DEVICE, own.name(), 2 << 20));
  EXPECT_WIRE_CODE(r, INVALID_ARGUMENT);
  auto s = mallory->Call(RegisterShmReq(own.name(), 2 << 20));
  EXPECT_WIRE_CODE(s, INVALID_ARGUMENT);
  // The right size is fine.
  EXPECT_WIRE_CODE(mallory->Call(RegisterDeviceReq(wire::BUFFER_EMULATED_DEVICE, own.name(), 1 << 20)),
                   OK);
}

class Hole12_RestartIsolation : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }
};

TEST_F(Hole12_RestartIsolation, AlicesNvmePagesStayUnseenAfterRestart) {
  auto keys = itest::MakeChain(itest::SmallLayout(), 1202, 16);
  {
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, keys));
  }
  ASSERT_NO_FATAL_FAILURE(FlushAll());
  // The operator lists the tenants in another order this time: namespaces
  // must follow names, not positions.
  {
    std::ofstream(daemon_->dir() + "/tenants.json") << TenantsJson("", "", /*mallory_first=*/true);
  }
  ASSERT_TRUE(daemon_->Restart().ok());
  auto mallory = Mallory();
  ExpectUnseenBy(*mallory, keys);
  auto pf = mallory->Call(PrefetchReq(keys, 60000));
  EXPECT_WIRE_CODE(pf, OK);
  EXPECT_EQ(pf->response.prefetch().missing(), keys.size());
  auto del = mallory->Call(DeleteReq(keys));
  EXPECT_WIRE_CODE(del, OK);
  EXPECT_EQ(del->response.delete_().deleted(), 0u);
  ExpectAliceIntact(keys);
}

}  // namespace
}  // namespace kvtier::security
