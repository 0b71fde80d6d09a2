// Unit tests of tiers/nvme: the checked Device API, the memory twin, the file
// device on both engines (on a real-disk directory with O_DIRECT), registered
// buffers, the tmpfs / unwritable-directory errors and every fault class of
// the fault-injecting wrapper.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <iostream>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/test_hooks.h"
#include "tiers/common/io_class.h"
#include "tiers/nvme/device.h"

namespace kvtier::tiers::nvme {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Buf = std::unique_ptr<char, FreeDeleter>;

Buf AlignedBuf(uint64_t n, char fill = 0) {
  Buf b(static_cast<char*>(std::aligned_alloc(kBlockSize, n)));
  std::memset(b.get(), fill, n);
  return b;
}

// Fills with a pattern unique to (seed, byte index).
void Pattern(char* p, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, std::min<uint64_t>(8, n - i));
  }
}

absl::Status WaitRead(Device& d, uint64_t off, void* buf, uint64_t n) {
  absl::Notification done;
  absl::Status result;
  d.ReadAsync(off, buf, n, [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::Status WaitWrite(Device& d, uint64_t off, const void* buf, uint64_t n) {
  absl::Notification done;
  absl::Status result;
  d.WriteAsync(off, buf, n, [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

// A fresh directory on a file system that takes O_DIRECT (not tmpfs), or ""
// when none of the candidates does.
std::string RealDiskDir() {
  std::vector<std::string> candidates;
  for (const char* env : {"KVTIER_TEST_NVME_DIR", "TMPDIR"}) {
    if (const char* v = std::getenv(env); v != nullptr && *v != '\0') candidates.push_back(v);
  }
  candidates.insert(candidates.end(), {"/var/tmp", "/tmp", fs::current_path().string()});
  for (const std::string& base : candidates) {
    std::string tmpl = base + "/kvtier-nvme-test.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) continue;
    struct statfs sfs;
    bool ok = ::statfs(tmpl.c_str(), &sfs) == 0 && sfs.f_type != TMPFS_MAGIC;
    if (ok) {
      std::string probe = tmpl + "/probe";
      int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
      Buf b = AlignedBuf(kBlockSize);
      ok = fd >= 0 && ::pwrite(fd, b.get(), kBlockSize, 0) == kBlockSize;
      if (fd >= 0) ::close(fd);
      ::unlink(probe.c_str());
    }
    if (ok) return tmpl;
    fs::remove_all(tmpl);
  }
  return "";
}

class TempDir {
 public:
  TempDir() : path_(RealDiskDir()) {}
  ~TempDir() {
    if (!path_.empty()) fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

#define REQUIRE_DISK(dir)                                                                   \
  if ((dir).path().empty())                                                                 \
  GTEST_SKIP() << "no directory here supports O_DIRECT (tried $KVTIER_TEST_NVME_DIR, "      \
                  "$TMPDIR, /var/tmp, /tmp, cwd)"

// ---- Checks and the memory twin ------------------------------------------

TEST(NvmeDeviceChecks, RejectsMisalignedAndOutOfRange) {
  auto dev = CreateMemoryDevice(1 << 20);
  Buf buf = AlignedBuf(2 * kBlockSize);
  absl::Status s = dev->Read(100, buf.get(), kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("offset"));
  s = dev->Write(0, buf.get(), 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("length"));
  s = dev->Write(0, buf.get(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = dev->Read(0, buf.get() + 8, kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("buffer"));
  s = dev->Read((1 << 20) - kBlockSize, buf.get(), 2 * kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  s = dev->Read(UINT64_MAX - kBlockSize + 1, buf.get(), kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(dev->Read((1 << 20) - kBlockSize, buf.get(), kBlockSize).ok());

  // An async call that fails the checks reports on the calling thread, at once.
  bool called = false;
  dev->WriteAsync(3, buf.get(), kBlockSize, [&](absl::Status st) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    called = true;
  });
  EXPECT_TRUE(called);
  DeviceStats st = dev->stats();
  EXPECT_EQ(st.rejected, 7u);
  EXPECT_EQ(st.reads, 1u);
  EXPECT_EQ(st.writes, 0u);
}

TEST(NvmeMemoryDevice, RoundTripAndStats) {
  auto dev = CreateMemoryDevice(1 << 20);
  EXPECT_EQ(dev->size(), 1u << 20);
  Buf in = AlignedBuf(64 << 10), out = AlignedBuf(64 << 10);
  Pattern(in.get(), 64 << 10, 1);
  ASSERT_TRUE(dev->Write(8192, in.get(), 64 << 10).ok());
  ASSERT_TRUE(dev->Read(8192, out.get(), 64 << 10).ok());
  EXPECT_EQ(std::memcmp(in.get(), out.get(), 64 << 10), 0);
  Pattern(in.get(), kBlockSize, 2);
  ASSERT_TRUE(WaitWrite(*dev, 0, in.get(), kBlockSize).ok());
  ASSERT_TRUE(WaitRead(*dev, 0, out.get(), kBlockSize).ok());
  EXPECT_EQ(std::memcmp(in.get(), out.get(), kBlockSize), 0);
  EXPECT_TRUE(dev->Flush().ok());
  DeviceStats st = dev->stats();
  EXPECT_EQ(st.reads, 2u);
  EXPECT_EQ(st.writes, 2u);
  EXPECT_EQ(st.bytes_read, (64u << 10) + kBlockSize);
  EXPECT_EQ(st.bytes_written, (64u << 10) + kBlockSize);
  EXPECT_EQ(st.read_errors + st.write_errors + st.rejected + st.inflight, 0u);
  EXPECT_GE(st.max_inflight, 1u);
  EXPECT_THAT(dev->Describe(), HasSubstr("memory"));
}

// ---- The file device -------------------------------------------------------

class NvmeFileDevice : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  absl::StatusOr<std::unique_ptr<Device>> Open(uint64_t size, uint32_t threads = 1) {
    FileDeviceConfig c;
    c.path = dir_.path() + "/nvme/data.slab";
    c.size = size;
    c.io_threads = threads;
    c.engine = GetParam();
    return CreateFileDevice(c);
  }
  // Skips when io_uring is refused here (seccomp): the fallback engine is
  // what kAuto would use, and it has its own instance of these tests.
  void SetUp() override {
    if (dir_.path().empty()) GTEST_SKIP() << "no directory here supports O_DIRECT";
    auto dev = Open(1 << 20);
    if (!dev.ok() && GetParam() == IoEngineKind::kIoUring &&
        std::string(dev.status().message()).find("io_uring unavailable") != std::string::npos) {
      GTEST_SKIP() << dev.status();
    }
    ASSERT_TRUE(dev.ok()) << dev.status();
  }
  TempDir dir_;
};

TEST_P(NvmeFileDevice, RoundTripSyncAsyncAndReopen) {
  auto dev = Open(4 << 20);
  ASSERT_TRUE(dev.ok()) << dev.status();
  std::string desc = (*dev)->Describe();
  EXPECT_THAT(desc, HasSubstr("O_DIRECT"));
  EXPECT_THAT(desc, HasSubstr("fallocate"));
  EXPECT_THAT(desc, HasSubstr(GetParam() == IoEngineKind::kIoUring ? "io_uring" : "thread-pool"));
  Buf a = AlignedBuf(1 << 20), b = AlignedBuf(1 << 20), out = AlignedBuf(1 << 20);
  Pattern(a.get(), 1 << 20, 10);
  Pattern(b.get(), 1 << 20, 11);
  ASSERT_TRUE((*dev)->Write(0, a.get(), 1 << 20).ok());
  ASSERT_TRUE(WaitWrite(**dev, 3 << 20, b.get(), 1 << 20).ok());
  ASSERT_TRUE(WaitRead(**dev, 0, out.get(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(a.get(), out.get(), 1 << 20), 0);
  ASSERT_TRUE((*dev)->Read(3 << 20, out.get(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(b.get(), out.get(), 1 << 20), 0);
  ASSERT_TRUE((*dev)->Flush().ok());
  dev->reset();

  auto again = Open(4 << 20);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Read(3 << 20, out.get(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(b.get(), out.get(), 1 << 20), 0);
}

// 1024 I/Os of 4-32 KiB at depth 64 on two rings, submitted from four
// threads; every byte checked. The ranges are packed back to back: on ext4
// mounted with `discard`, a file left with thousands of written/unwritten
// extent fragments takes seconds to delete.
TEST_P(NvmeFileDevice, ManyConcurrentAsyncIos) {
  constexpr int kIos = 1024;
  std::vector<uint64_t> len(kIos), off(kIos);
  std::mt19937 rng(7);
  uint64_t total = 0;
  for (int i = 0; i < kIos; ++i) {
    len[i] = (1 + rng() % 8) * kBlockSize;
    off[i] = total;
    total += len[i];
  }
  auto dev = Open(total, /*threads=*/2);
  ASSERT_TRUE(dev.ok()) << dev.status();
  Buf src = AlignedBuf(total), dst = AlignedBuf(total);
  Pattern(src.get(), total, 20);

  auto run_all = [&](bool write) {
    std::atomic<int> left{kIos}, failed{0};
    absl::Notification done;
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&, t] {
        for (int i = t; i < kIos; i += 4) {
          auto cb = [&](absl::Status s) {
            if (!s.ok()) failed.fetch_add(1);
            if (left.fetch_sub(1) == 1) done.Notify();
          };
          if (write) {
            (*dev)->WriteAsync(off[i], src.get() + off[i], len[i], cb);
          } else {
            (*dev)->ReadAsync(off[i], dst.get() + off[i], len[i], cb);
          }
        }
      });
    }
    for (auto& t : submitters) t.join();
    done.WaitForNotification();
    return failed.load();
  };
  EXPECT_EQ(run_all(true), 0);
  EXPECT_EQ(run_all(false), 0);
  EXPECT_EQ(std::memcmp(src.get(), dst.get(), total), 0);
  DeviceStats st = (*dev)->stats();
  EXPECT_EQ(st.reads, uint64_t{kIos});
  EXPECT_EQ(st.writes, uint64_t{kIos});
  EXPECT_EQ(st.inflight, 0u);
  EXPECT_GT(st.max_inflight, 1u);
}

// Callbacks that issue the next I/O (the benchmark's pattern) and a device
// destroyed with I/O in flight: every callback runs exactly once.
TEST_P(NvmeFileDevice, DestructorDrainsInFlightIo) {
  auto dev = Open(8 << 20);
  ASSERT_TRUE(dev.ok()) << dev.status();
  Buf buf = AlignedBuf(8 << 20);
  std::atomic<int> completed{0};
  for (int i = 0; i < 256; ++i) {
    (*dev)->WriteAsync(uint64_t(i % 64) * (128 << 10), buf.get() + (i % 64) * (128 << 10),
                       128 << 10, [&](absl::Status s) {
                         EXPECT_TRUE(s.ok()) << s;
                         completed.fetch_add(1);
                       });
  }
  dev->reset();
  EXPECT_EQ(completed.load(), 256);
}

TEST_P(NvmeFileDevice, RegisteredBufferRegion) {
  auto dev = Open(16 << 20);
  ASSERT_TRUE(dev.ok()) << dev.status();
  constexpr uint64_t kRegion = 4 << 20;
  void* region = ::mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  char* r = static_cast<char*>(region);
  EXPECT_EQ((*dev)->RegisterBufferRegion(nullptr, 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*dev)->RegisterBufferRegion(region, kRegion).ok());
  std::string desc = (*dev)->Describe();
  if (GetParam() == IoEngineKind::kIoUring) {
    // Registration is best effort; say what happened for the log.
    std::cout << "[ info ] " << desc << "\n";
  }
  Pattern(r, 1 << 20, 30);
  ASSERT_TRUE(WaitWrite(**dev, 5 << 20, r, 1 << 20).ok());                 // fixed write
  ASSERT_TRUE(WaitRead(**dev, 5 << 20, r + (2 << 20), 1 << 20).ok());     // fixed read
  EXPECT_EQ(std::memcmp(r, r + (2 << 20), 1 << 20), 0);
  Buf out = AlignedBuf(1 << 20);  // outside the region: plain I/O
  ASSERT_TRUE(WaitRead(**dev, 5 << 20, out.get(), 1 << 20).ok());
  EXPECT_EQ(std::memcmp(r, out.get(), 1 << 20), 0);
  dev->reset();
  ::munmap(region, kRegion);
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeFileDevice,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kThreadPool),
                         [](const auto& info) {
                           return info.param == IoEngineKind::kIoUring ? "IoUring"
                                                                        : "ThreadPool";
                         });

TEST(NvmeFileDeviceErrors, BadConfig) {
  FileDeviceConfig c;
  c.path = "/var/tmp/x";
  c.size = 1000;
  EXPECT_EQ(CreateFileDevice(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.size = 1 << 20;
  c.queue_depth = 0;
  EXPECT_EQ(CreateFileDevice(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.queue_depth = 64;
  c.path = "";
  EXPECT_EQ(CreateFileDevice(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NvmeFileDeviceErrors, TmpfsIsRefusedClearly) {
  struct statfs sfs;
  if (::statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC) {
    GTEST_SKIP() << "/dev/shm is not tmpfs here";
  }
  std::string dir = "/dev/shm/kvtier-nvme-test-" + std::to_string(::getpid());
  FileDeviceConfig c;
  c.path = dir + "/data.slab";
  c.size = 1 << 20;
  auto dev = CreateFileDevice(c);
  fs::remove_all(dir);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr(c.path));
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("tmpfs"));
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("real disk"));
}

TEST(NvmeFileDeviceErrors, ParentIsAFile) {
  TempDir dir;
  REQUIRE_DISK(dir);
  std::string file = dir.path() + "/plain";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  FileDeviceConfig c;
  c.path = file + "/sub/data.slab";
  c.size = 1 << 20;
  auto dev = CreateFileDevice(c);
  ASSERT_FALSE(dev.ok());
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr(file));
}

// Root ignores directory permissions, so as root the attempt runs in a child
// that drops to nobody.
TEST(NvmeFileDeviceErrors, UnwritableDirectory) {
  TempDir dir;
  REQUIRE_DISK(dir);
  std::string ro = dir.path() + "/readonly";
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  FileDeviceConfig c;
  c.path = ro + "/nvme/data.slab";
  c.size = 1 << 20;
  auto check = [&]() -> int {
    auto dev = CreateFileDevice(c);
    if (dev.ok()) return 2;
    const std::string msg(dev.status().message());
    if (dev.status().code() != absl::StatusCode::kPermissionDenied) return 3;
    return msg.find(ro) == std::string::npos ? 4 : 0;
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(check(), 0);
    return;
  }
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(10);
    }
    ::_exit(check());
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) GTEST_SKIP() << "cannot drop privileges here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: opened, 3: wrong code, 4: path not named";
}

// ---- Fault injection -------------------------------------------------------

class NvmeFaults : public ::testing::TestWithParam<bool /*async*/> {
 protected:
  NvmeFaults()
      : control_(std::make_shared<FaultControl>()),
        dev_(CreateFaultInjectingDevice(CreateMemoryDevice(1 << 20), control_)) {}
  absl::Status Read(uint64_t off, void* buf, uint64_t n) {
    return GetParam() ? WaitRead(*dev_, off, buf, n) : dev_->Read(off, buf, n);
  }
  absl::Status Write(uint64_t off, const void* buf, uint64_t n) {
    return GetParam() ? WaitWrite(*dev_, off, buf, n) : dev_->Write(off, buf, n);
  }
  // Writes `old` (2 blocks of 'o') at 0 with faults off.
  void Seed() {
    control_->Set({});
    Buf old = AlignedBuf(2 * kBlockSize, 'o');
    ASSERT_TRUE(dev_->Write(0, old.get(), 2 * kBlockSize).ok());
  }
  std::shared_ptr<FaultControl> control_;
  std::unique_ptr<Device> dev_;
};

TEST_P(NvmeFaults, NthReadFailsWithEio) {
  Seed();
  control_->Set({.fail_read_n = 2});
  Buf b = AlignedBuf(kBlockSize);
  EXPECT_TRUE(Read(0, b.get(), kBlockSize).ok());
  absl::Status s = Read(0, b.get(), kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Input/output error"));
  EXPECT_TRUE(Read(0, b.get(), kBlockSize).ok());
  EXPECT_EQ(control_->faults_injected(), 1u);
  EXPECT_EQ(dev_->stats().read_errors, 1u);
}

TEST_P(NvmeFaults, NthWriteFailsWithEnospcAndChangesNothing) {
  Seed();
  control_->Set({.fail_write_n = 1, .write_fault = FaultKind::kEnospc});
  Buf b = AlignedBuf(kBlockSize, 'n'), out = AlignedBuf(kBlockSize);
  absl::Status s = Write(0, b.get(), kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("No space left on device"));
  ASSERT_TRUE(Read(0, out.get(), kBlockSize).ok());
  EXPECT_EQ(out.get()[0], 'o');
  EXPECT_TRUE(Write(0, b.get(), kBlockSize).ok());  // only the 1st write failed
  EXPECT_EQ(dev_->stats().write_errors, 1u);
}

TEST_P(NvmeFaults, ShortReadFillsHalf) {
  Seed();
  control_->Set({.fail_read_n = 1, .read_fault = FaultKind::kShortIo});
  Buf out = AlignedBuf(2 * kBlockSize, 'x');
  absl::Status s = Read(0, out.get(), 2 * kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("short read"));
  EXPECT_EQ(out.get()[kBlockSize - 1], 'o');
  EXPECT_EQ(out.get()[kBlockSize], 'x');
}

TEST_P(NvmeFaults, ShortWriteLandsHalfAndFails) {
  Seed();
  control_->Set({.fail_write_n = 1, .write_fault = FaultKind::kShortIo});
  Buf in = AlignedBuf(2 * kBlockSize, 'n'), out = AlignedBuf(2 * kBlockSize);
  absl::Status s = Write(0, in.get(), 2 * kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("short write"));
  ASSERT_TRUE(Read(0, out.get(), 2 * kBlockSize).ok());
  EXPECT_EQ(out.get()[kBlockSize - 1], 'n');
  EXPECT_EQ(out.get()[kBlockSize], 'o');
}

TEST_P(NvmeFaults, TornWriteLeavesHalfTheBytes) {
  for (bool reports_ok : {true, false}) {
    Seed();
    // One block: the tear falls mid-block (2048 new bytes, 2048 old).
    control_->Set({.fail_write_n = 1,
                   .write_fault = FaultKind::kTornWrite,
                   .torn_write_reports_ok = reports_ok});
    Buf in = AlignedBuf(kBlockSize, 'n'), out = AlignedBuf(kBlockSize);
    absl::Status s = Write(0, in.get(), kBlockSize);
    if (reports_ok) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    }
    ASSERT_TRUE(Read(0, out.get(), kBlockSize).ok());
    EXPECT_EQ(out.get()[kBlockSize / 2 - 1], 'n');
    EXPECT_EQ(out.get()[kBlockSize / 2], 'o');
  }
}

TEST_P(NvmeFaults, StickyFailsEverythingAfterN) {
  Seed();
  control_->Set({.fail_write_n = 2, .sticky = true});
  Buf b = AlignedBuf(kBlockSize);
  EXPECT_TRUE(Write(0, b.get(), kBlockSize).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Write(0, b.get(), kBlockSize).ok());
  EXPECT_EQ(control_->writes_seen(), 4u);
  control_->Set({});  // a test may heal the device at any time
  EXPECT_TRUE(Write(0, b.get(), kBlockSize).ok());
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, NvmeFaults, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Async" : "Sync"; });

// A torn write through a real file: the tear is on disk after reopen.
TEST(NvmeFaultsOnFile, TornWriteOnDisk) {
  TempDir dir;
  REQUIRE_DISK(dir);
  FileDeviceConfig c;
  c.path = dir.path() + "/data.slab";
  c.size = 1 << 20;
  auto control = std::make_shared<FaultControl>();
  {
    auto file = CreateFileDevice(c);
    ASSERT_TRUE(file.ok()) << file.status();
    auto dev = CreateFaultInjectingDevice(*std::move(file), control);
    Buf old = AlignedBuf(4 * kBlockSize, 'o'), in = AlignedBuf(4 * kBlockSize, 'n');
    ASSERT_TRUE(dev->Write(0, old.get(), 4 * kBlockSize).ok());
    control->Set({.fail_write_n = 1,
                  .write_fault = FaultKind::kTornWrite,
                  .torn_write_reports_ok = true});
    ASSERT_TRUE(WaitWrite(*dev, 0, in.get(), 4 * kBlockSize).ok());
    ASSERT_TRUE(dev->Flush().ok());
    EXPECT_THAT(dev->Describe(), HasSubstr("fault-injecting"));
  }
  auto again = CreateFileDevice(c);
  ASSERT_TRUE(again.ok()) << again.status();
  Buf out = AlignedBuf(4 * kBlockSize);
  ASSERT_TRUE((*again)->Read(0, out.get(), 4 * kBlockSize).ok());
  EXPECT_EQ(out.get()[2 * kBlockSize - 1], 'n');
  EXPECT_EQ(out.get()[2 * kBlockSize], 'o');
}

// ---- I/O classes (io_uring engine) ------------------------------------------

TEST(NvmeIoClasses, SharesAreValidated) {
  FileDeviceConfig c;
  c.path = "/nonexistent-kvtier/x";
  c.size = 1 << 20;
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    c.prefetch_share = bad;
    absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("prefetch_share")) << bad;
    c.prefetch_share = 0.5;
    c.writeback_share = bad;
    EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument) << bad;
    c.writeback_share = 0.25;
  }
  c.prefetch_share = c.writeback_share = 1.0;
  EXPECT_TRUE(c.Validate().ok());
}

// With the ring held between taking its queue and starting I/O, requests
// queued as write-back, write-back, prefetch, demand start (queue depth 1:
// one at a time) demand first, then prefetch, then write-back in order; and
// each is counted under the class of the thread that issued it.
// A file device on io_uring whose ring the test can hold once between
// taking its queue and starting I/O (sync point nvme.ring.before_dispatch),
// so requests queued meanwhile reach the ring all at once.
class NvmeHeldRing : public ::testing::Test {
 protected:
  void Open(uint32_t queue_depth) {
    if (!test_hooks::kEnabled) GTEST_SKIP() << "needs KVTIER_TEST_HOOKS";
    REQUIRE_DISK(dir_);
    FileDeviceConfig c;
    c.path = dir_.path() + "/data.slab";
    c.size = 1 << 20;
    c.queue_depth = queue_depth;
    c.engine = IoEngineKind::kIoUring;
    auto dev = CreateFileDevice(c);
    if (!dev.ok() && absl::StrContains(dev.status().message(), "io_uring unavailable"))
      GTEST_SKIP() << dev.status();
    ASSERT_TRUE(dev.ok()) << dev.status();
    dev_ = *std::move(dev);
    hooks_.SetCallback("nvme.ring.before_dispatch", [this](void*) {
      if (!armed_.exchange(false)) return;
      reached_.Notify();
      release_.WaitForNotification();
    });
    hooks_.EnableProcessing();
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();  // never leave the ring held
    dev_.reset();
    hooks_.DisableProcessing();
    hooks_.ClearAll();
  }

  test_hooks::SyncPoints& hooks_ = test_hooks::SyncPoints::Get();
  TempDir dir_;
  std::unique_ptr<Device> dev_;
  std::atomic<bool> armed_{true};
  absl::Notification reached_, release_;
};

TEST_F(NvmeHeldRing, DemandStartsBeforePrefetchBeforeWriteback) {
  Open(1);
  if (IsSkipped() || HasFatalFailure()) return;
  absl::Mutex mu;
  std::vector<std::string> order;
  std::atomic<int> done{0};
  auto io = [&](const std::string& name, IoClass cls, bool write, uint64_t block, char* buf) {
    IoClassScope scope(cls);
    auto cb = [&, name](absl::Status s) {
      EXPECT_TRUE(s.ok()) << name << ": " << s;
      absl::MutexLock lock(&mu);
      order.push_back(name);
      done.fetch_add(1);
    };
    if (write) {
      dev_->WriteAsync(block * kBlockSize, buf, kBlockSize, cb);
    } else {
      dev_->ReadAsync(block * kBlockSize, buf, kBlockSize, cb);
    }
  };
  std::vector<Buf> bufs;
  for (int i = 0; i < 5; ++i) bufs.push_back(AlignedBuf(kBlockSize, static_cast<char>('a' + i)));
  io("first", IoClass::kDemand, false, 0, bufs[0].get());  // wakes the ring: it stops at the hook
  ASSERT_TRUE(reached_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  io("writeback1", IoClass::kWriteback, true, 1, bufs[1].get());
  io("writeback2", IoClass::kWriteback, true, 2, bufs[2].get());
  io("prefetch", IoClass::kPrefetch, false, 3, bufs[3].get());
  io("demand", IoClass::kDemand, false, 4, bufs[4].get());
  release_.Notify();
  for (int i = 0; i < 1000 && done.load() < 5; ++i) absl::SleepFor(absl::Milliseconds(10));
  hooks_.DisableProcessing();
  hooks_.ClearAll();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(order, ::testing::ElementsAre("first", "demand", "prefetch", "writeback1",
                                            "writeback2"));
  const DeviceStats st = dev_->stats();
  EXPECT_EQ(st.class_ios[static_cast<size_t>(IoClass::kDemand)], 2u);
  EXPECT_EQ(st.class_ios[static_cast<size_t>(IoClass::kPrefetch)], 1u);
  EXPECT_EQ(st.class_ios[static_cast<size_t>(IoClass::kWriteback)], 2u);
}

// A prefetch read a GET joins while it waits in the queue (its IoUrgency is
// set) is served as demand from then on: ahead of the prefetches queued
// before it, and at demand's priority. With the ring held and queue depth 1:
// prefetches p1, p2 (joined later), p3 and a demand d queue up; p2's token is
// set before the ring goes on. Order: first, d, p2 (now demand, after the
// demand queued before the join), then p1, p3 at prefetch.
TEST_F(NvmeHeldRing, JoinedPrefetchIsServedAsDemand) {
  Open(1);
  if (IsSkipped() || HasFatalFailure()) return;
  uint64_t escalated = 0;
  hooks_.SetCallback("nvme.ring.escalated",
                     [&](void* arg) { escalated = *static_cast<const uint64_t*>(arg); });
  absl::Mutex mu;
  std::vector<std::string> order;
  std::atomic<int> done{0};
  auto read = [&](const std::string& name, IoClass cls, IoUrgency urgency, uint64_t block,
                  char* buf) {
    IoClassScope scope(cls);
    IoUrgencyScope urgent(std::move(urgency));
    dev_->ReadAsync(block * kBlockSize, buf, kBlockSize, [&, name](absl::Status s) {
      EXPECT_TRUE(s.ok()) << name << ": " << s;
      absl::MutexLock lock(&mu);
      order.push_back(name);
      done.fetch_add(1);
    });
  };
  std::vector<Buf> bufs;
  for (int i = 0; i < 5; ++i) bufs.push_back(AlignedBuf(kBlockSize));
  auto joined = std::make_shared<std::atomic<bool>>(false);
  read("first", IoClass::kDemand, nullptr, 0, bufs[0].get());  // the ring stops at the hook
  ASSERT_TRUE(reached_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  read("p1", IoClass::kPrefetch, std::make_shared<std::atomic<bool>>(false), 1, bufs[1].get());
  read("p2", IoClass::kPrefetch, joined, 2, bufs[2].get());
  read("p3", IoClass::kPrefetch, nullptr, 3, bufs[3].get());
  read("d", IoClass::kDemand, nullptr, 4, bufs[4].get());
  joined->store(true);  // a GET joins p2's promotion
  release_.Notify();
  for (int i = 0; i < 1000 && done.load() < 5; ++i) absl::SleepFor(absl::Milliseconds(10));
  hooks_.DisableProcessing();
  hooks_.ClearAll();
  absl::MutexLock lock(&mu);
  EXPECT_THAT(order, ::testing::ElementsAre("first", "d", "p2", "p1", "p3"));
  EXPECT_EQ(escalated, 1u);
}

// The shares hold at every start: prefetch never has more than its cap in
// flight, write-back no more than its cap while any read is in flight, and
// all the depth once the reads are done.
TEST_F(NvmeHeldRing, SharesCapWhatIsInFlight) {
  Open(8);  // caps: prefetch 8 x 0.25 = 2, write-back 8 x 0.125 = 1
  if (IsSkipped() || HasFatalFailure()) return;
  // Runs on the ring thread, the only writer of the counts.
  uint32_t max_prefetch = 0, max_wb_with_reads = 0, max_wb_alone = 0;
  hooks_.SetCallback("nvme.ring.started", [&](void* arg) {
    const auto* n = static_cast<const uint32_t*>(arg);
    const uint32_t reads = n[0] + n[1], wb = n[2];
    max_prefetch = std::max(max_prefetch, n[1]);
    uint32_t& max_wb = reads > 0 ? max_wb_with_reads : max_wb_alone;
    max_wb = std::max(max_wb, wb);
  });
  hooks_.EnableProcessing();
  std::atomic<int> done{0};
  Buf block = AlignedBuf(kBlockSize, 'x');
  std::vector<Buf> in;
  auto submit = [&](IoClass cls, bool write, int n) {
    IoClassScope scope(cls);
    for (int i = 0; i < n; ++i) {
      auto cb = [&](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        done.fetch_add(1);
      };
      if (write) {
        dev_->WriteAsync(uint64_t(i) * kBlockSize, block.get(), kBlockSize, cb);
      } else {
        in.push_back(AlignedBuf(kBlockSize));
        dev_->ReadAsync(uint64_t(i) * kBlockSize, in.back().get(), kBlockSize, cb);
      }
    }
  };
  submit(IoClass::kDemand, false, 1);  // wakes the ring: it stops at the hook
  ASSERT_TRUE(reached_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  submit(IoClass::kWriteback, true, 32);
  submit(IoClass::kPrefetch, false, 8);
  submit(IoClass::kDemand, false, 4);
  release_.Notify();
  for (int i = 0; i < 1000 && done.load() < 45; ++i) absl::SleepFor(absl::Milliseconds(10));
  hooks_.DisableProcessing();
  hooks_.ClearAll();
  EXPECT_EQ(done.load(), 45);
  EXPECT_LE(max_prefetch, 2u);
  EXPECT_LE(max_wb_with_reads, 1u);
  EXPECT_GT(max_wb_alone, 1u) << "write-back never used more of the depth once reads were done";
}

// Under a flood of write-back, demand reads still complete, and every
// write lands: the shares order the queue, they starve no class.
TEST(NvmeIoClasses, WritebackFloodStillLandsAndReadsComplete) {
  TempDir dir;
  REQUIRE_DISK(dir);
  FileDeviceConfig c;
  c.path = dir.path() + "/data.slab";
  c.size = 4 << 20;
  c.queue_depth = 8;
  auto dev = CreateFileDevice(c);
  ASSERT_TRUE(dev.ok()) << dev.status();
  constexpr int kBlocks = 256;
  Buf data = AlignedBuf(kBlocks * kBlockSize);
  for (int i = 0; i < kBlocks; ++i) std::memset(data.get() + i * kBlockSize, 'A' + i % 26, kBlockSize);
  std::atomic<int> writes{0}, reads{0}, errors{0};
  {
    IoClassScope scope(IoClass::kWriteback);
    for (int i = 0; i < kBlocks; ++i)
      (*dev)->WriteAsync(i * kBlockSize, data.get() + i * kBlockSize, kBlockSize,
                         [&](absl::Status s) { (s.ok() ? writes : errors).fetch_add(1); });
  }
  Buf in = AlignedBuf(16 * kBlockSize);
  for (int i = 0; i < 16; ++i)
    (*dev)->ReadAsync(i * kBlockSize, in.get() + i * kBlockSize, kBlockSize,
                      [&](absl::Status s) { (s.ok() ? reads : errors).fetch_add(1); });
  for (int i = 0; i < 3000 && writes.load() + reads.load() + errors.load() < kBlocks + 16; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(reads.load(), 16);
  ASSERT_EQ(writes.load(), kBlocks);
  Buf out = AlignedBuf(kBlocks * kBlockSize);
  ASSERT_TRUE((*dev)->Read(0, out.get(), kBlocks * kBlockSize).ok());
  EXPECT_EQ(std::memcmp(out.get(), data.get(), kBlocks * kBlockSize), 0);
}

}  // namespace
}  // namespace kvtier::tiers::nvme
