// The device backend against the EmulatedDevice: copy coalescing, async
// copies with completion callbacks in stream order, pointer checks, CopyGroup,
// and IPC export/import between two real processes (fork).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tiers/hbm/device.h"

namespace kvtier::tiers::hbm {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

TEST(CoalesceTest, MergesRunsContiguousOnBothSides) {
  std::vector<uint8_t> src(1000), dst(1000);
  std::vector<CopyRange> in = {
      {dst.data() + 200, src.data() + 200, 100},  // out of order on purpose
      {dst.data() + 0, src.data() + 0, 100},
      {dst.data() + 100, src.data() + 100, 100},
      {dst.data() + 500, src.data() + 300, 100},  // src continues, dst does not
      {dst.data() + 600, src.data() + 900, 0},    // empty: dropped
  };
  std::vector<CopyRange> out = Coalesce(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].src, src.data());
  EXPECT_EQ(out[0].dst, dst.data());
  EXPECT_EQ(out[0].bytes, 300u);
  EXPECT_EQ(out[1].src, src.data() + 300);
  EXPECT_EQ(out[1].dst, dst.data() + 500);
  EXPECT_EQ(out[1].bytes, 100u);
}

TEST(EmulatedDeviceTest, CopiesEveryDirectionByteExact) {
  auto dev = CreateEmulatedDevice();
  EXPECT_TRUE(dev->emulated());
  EXPECT_EQ(dev->description(), "emulated (host memory)");
  constexpr size_t kN = 1 << 20;
  auto a = dev->Allocate(kN);
  auto b = dev->Allocate(kN);
  ASSERT_TRUE(a.ok() && b.ok());
  auto* da = static_cast<uint8_t*>(*a);
  auto* db = static_cast<uint8_t*>(*b);
  std::vector<uint8_t> host = Pattern(kN, 3), back(kN, 0);
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{da, host.data(), kN}}).ok());
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToDevice, {{db, da, kN}}, 1).ok());
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{back.data(), db, kN}}).ok());
  EXPECT_EQ(back, host);
  dev->Free(da);
  dev->Free(db);
}

TEST(EmulatedDeviceTest, CompletionIsAsynchronousAndInStreamOrder) {
  auto dev = CreateEmulatedDevice({.streams = 1, .copy_delay_us = 20000});
  auto mem = dev->Allocate(4096);
  ASSERT_TRUE(mem.ok());
  auto* d = static_cast<uint8_t*>(*mem);
  std::vector<uint8_t> one(4096, 1), two(4096, 2), out(4096, 0);
  std::vector<int> order;
  absl::Mutex mu;
  absl::Notification last;
  auto note = [&](int i) {
    return [&, i](absl::Status st) {
      EXPECT_TRUE(st.ok());
      absl::MutexLock lock(&mu);
      order.push_back(i);
      if (i == 3) last.Notify();
    };
  };
  ASSERT_TRUE(dev->CopyAsync(CopyKind::kHostToDevice, {{d, one.data(), 4096}}, 0, note(1)).ok());
  ASSERT_TRUE(dev->CopyAsync(CopyKind::kHostToDevice, {{d, two.data(), 4096}}, 0, note(2)).ok());
  ASSERT_TRUE(dev->CopyAsync(CopyKind::kDeviceToHost, {{out.data(), d, 4096}}, 0, note(3)).ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(order.empty()) << "a 20 ms copy completed inside CopyAsync";
  }
  last.WaitForNotification();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(out, two);  // the later H2D landed before the D2H read it
  dev->Free(d);
}

TEST(EmulatedDeviceTest, RejectsPointersOutsideDeviceMemory) {
  auto dev = CreateEmulatedDevice();
  auto mem = dev->Allocate(4096);
  ASSERT_TRUE(mem.ok());
  std::vector<uint8_t> host(8192);
  auto* d = static_cast<uint8_t*>(*mem);
  absl::Status st = dev->Copy(CopyKind::kHostToDevice, {{d + 1024, host.data(), 4096}});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("not inside device memory"), std::string::npos) << st;
  st = dev->Copy(CopyKind::kDeviceToDevice, {{d, host.data(), 16}});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  dev->Free(d);
}

TEST(EmulatedDeviceTest, CopyGroupWaitsForAllBatchesAndKeepsFirstError) {
  auto dev = CreateEmulatedDevice({.streams = 2, .copy_delay_us = 1000});
  auto mem = dev->Allocate(1 << 16);
  ASSERT_TRUE(mem.ok());
  auto* d = static_cast<uint8_t*>(*mem);
  std::vector<uint8_t> src = Pattern(1 << 16, 9), dst(1 << 16, 0), bad(16);
  {
    CopyGroup g(*dev);
    g.Add(CopyKind::kHostToDevice, {{d, src.data(), 1 << 15}}, 0);
    g.Add(CopyKind::kHostToDevice, {{d + (1 << 15), src.data() + (1 << 15), 1 << 15}}, 1);
    ASSERT_TRUE(g.Wait().ok());
  }
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{dst.data(), d, 1 << 16}}).ok());
  EXPECT_EQ(dst, src);
  CopyGroup g(*dev);
  g.Add(CopyKind::kDeviceToHost, {{dst.data(), bad.data(), 16}}, 0);  // bad source
  EXPECT_TRUE(absl::IsInvalidArgument(g.Wait()));
  dev->Free(d);
}

// A second process maps the exported memory, checks what the first wrote
// and writes an answer the first then sees: the two really share it.
TEST(EmulatedDeviceTest, IpcExportImportBetweenProcesses) {
  auto dev = CreateEmulatedDevice();
  constexpr size_t kN = 256 << 10;
  auto mem = dev->Allocate(kN);
  ASSERT_TRUE(mem.ok());
  auto* d = static_cast<uint8_t*>(*mem);
  std::vector<uint8_t> mine = Pattern(kN, 11), theirs = Pattern(kN / 2, 77);
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{d, mine.data(), kN}}).ok());
  auto handle = dev->ExportHandle(d);
  ASSERT_TRUE(handle.ok()) << handle.status();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto other = CreateEmulatedDevice();
    auto imported = other->ImportHandle(*handle, kN);
    if (!imported.ok()) _exit(2);
    std::vector<uint8_t> seen(kN);
    auto* p = static_cast<uint8_t*>(imported->ptr);
    if (!other->Copy(CopyKind::kDeviceToHost, {{seen.data(), p, kN}}).ok()) _exit(3);
    if (seen != mine) _exit(4);
    if (!other->Copy(CopyKind::kHostToDevice, {{p, theirs.data(), kN / 2}}).ok()) _exit(5);
    other->CloseImported(*imported);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);
  std::vector<uint8_t> now(kN / 2);
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{now.data(), d, kN / 2}}).ok());
  EXPECT_EQ(now, theirs);
  dev->Free(d);
}

TEST(EmulatedDeviceTest, ImportErrorsNameTheProblem) {
  auto dev = CreateEmulatedDevice();
  auto st = dev->ImportHandle("no-slash", 4096).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  st = dev->ImportHandle("/kvtier-test-no-such-object", 4096).status();
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  auto mem = dev->Allocate(4096);
  ASSERT_TRUE(mem.ok());
  auto handle = dev->ExportHandle(*mem);
  ASSERT_TRUE(handle.ok());
  st = dev->ImportHandle(*handle, 8192).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("smaller than 8192"), std::string::npos) << st;
  EXPECT_FALSE(dev->ExportHandle(static_cast<uint8_t*>(*mem) + 64).ok());
  dev->Free(*mem);
}

// The HBM pool is not exportable: the emulated device names no shm object
// for it, so a daemon killed with SIGKILL leaves nothing in /dev/shm.
TEST(EmulatedDeviceTest, NonExportableMemoryHasNoName) {
  auto dev = CreateEmulatedDevice();
  auto before = std::distance(std::filesystem::directory_iterator("/dev/shm"),
                              std::filesystem::directory_iterator());
  auto mem = dev->Allocate(1 << 20, /*exportable=*/false);
  ASSERT_TRUE(mem.ok());
  auto after = std::distance(std::filesystem::directory_iterator("/dev/shm"),
                             std::filesystem::directory_iterator());
  EXPECT_EQ(after, before);
  EXPECT_TRUE(absl::IsInvalidArgument(dev->ExportHandle(*mem).status()));
  std::vector<uint8_t> in = Pattern(1 << 20, 2), out(1 << 20);
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{*mem, in.data(), in.size()}}).ok());
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{out.data(), *mem, out.size()}}).ok());
  EXPECT_EQ(in, out);
  dev->Free(*mem);
}

TEST(DeviceFactoryTest, PicksByModeAndSaysWhy) {
  std::string why;
  auto none = CreateDevice(DeviceMode::kNone, 0, 0, &why);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto emu = CreateDevice(DeviceMode::kEmulated, 1 << 20, 0, &why);
  ASSERT_TRUE(emu.ok());
  EXPECT_TRUE((*emu)->emulated());
  EXPECT_NE(why.find("emulated"), std::string::npos);
  auto aut = CreateDevice(DeviceMode::kAuto, 0, 0, &why);
  ASSERT_TRUE(aut.ok());
  EXPECT_TRUE((*aut)->emulated()) << "auto with --hbm_bytes=0 must not take a GPU";
  if (CudaDeviceCount() == 0) {
    auto cuda = CreateDevice(DeviceMode::kCuda, 1 << 20, 0, &why);
    EXPECT_TRUE(absl::IsFailedPrecondition(cuda.status())) << cuda.status();
  }
  EXPECT_FALSE(ParseDeviceMode("gpu").ok());
  EXPECT_EQ(*ParseDeviceMode("emulated"), DeviceMode::kEmulated);
}

}  // namespace
}  // namespace kvtier::tiers::hbm
