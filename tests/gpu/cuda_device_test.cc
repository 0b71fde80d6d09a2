// CudaDevice on a real GPU: the page pool, pinned host memory, async copies
// in every direction (batched), the HBM tier on it, and CUDA IPC between two
// processes. Every test skips with the reason when there is no usable GPU.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tiers/hbm/device.h"
#include "tiers/hbm/hbm_tier.h"

namespace kvtier::tiers::hbm {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 11));
  return v;
}

std::shared_ptr<Device> GpuOrNull(std::string* why) {
  auto dev = CreateCudaDevice(0);
  if (!dev.ok()) {
    *why = std::string(dev.status().message());
    return nullptr;
  }
  return *dev;
}

#define REQUIRE_GPU(dev)                                                    \
  std::string why_;                                                         \
  auto dev = GpuOrNull(&why_);                                              \
  if (dev == nullptr) GTEST_SKIP() << "no usable CUDA device (" << why_ << ")"

TEST(CudaDeviceTest, PoolAndCopiesInEveryDirection) {
  REQUIRE_GPU(dev);
  EXPECT_FALSE(dev->emulated());
  EXPECT_NE(dev->description().find("cuda:0"), std::string::npos) << dev->description();
  constexpr size_t kN = 8 << 20;
  auto a = dev->Allocate(kN), b = dev->Allocate(kN);
  ASSERT_TRUE(a.ok() && b.ok());
  auto* da = static_cast<uint8_t*>(*a);
  auto* db = static_cast<uint8_t*>(*b);
  std::vector<uint8_t> host = Pattern(kN, 1), back(kN, 0);
  ASSERT_TRUE(dev->RegisterHost(host.data(), kN).ok());
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{da, host.data(), kN}}).ok());
  // A batch of 64 KiB pages in reverse order: one cudaMemcpyBatchAsync.
  std::vector<CopyRange> pages;
  for (size_t off = kN; off > 0; off -= 64 << 10)
    pages.push_back({db + off - (64 << 10), da + off - (64 << 10), 64 << 10});
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToDevice, pages, 1).ok());
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{back.data(), db, kN}}, 2).ok());
  EXPECT_EQ(back, host);
  dev->UnregisterHost(host.data());
  dev->Free(da);
  dev->Free(db);
}

TEST(CudaDeviceTest, HbmTierOnTheGpu) {
  REQUIRE_GPU(dev);
  auto tier = HbmTier::Create({.capacity_bytes = 4 << 20, .slab_bytes = 1 << 20}, dev);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->backing(), dev->description());
  auto slot = (*tier)->Allocate(256 << 10);
  ASSERT_TRUE(slot.ok());
  std::vector<uint8_t> in = Pattern(256 << 10, 4), out(256 << 10);
  ASSERT_TRUE((*tier)->Write(*slot, 0, in.data(), in.size()).ok());
  ASSERT_TRUE((*tier)->Read(*slot, 0, out.data(), out.size()).ok());
  EXPECT_EQ(in, out);
  (*tier)->Free(*slot);
}

// The child half of the IPC test: runs only when the parent re-executes this
// binary with KVTIER_GPU_IPC_HANDLE set.
TEST(CudaIpcChild, ImportVerifyAndAnswer) {
  const char* hex = getenv("KVTIER_GPU_IPC_HANDLE");
  if (hex == nullptr) GTEST_SKIP() << "helper of CudaIpcTest (run by it)";
  REQUIRE_GPU(dev);
  constexpr size_t kN = 4 << 20;
  auto mem = dev->ImportHandle(absl::HexStringToBytes(hex), kN);
  ASSERT_TRUE(mem.ok()) << mem.status();
  std::vector<uint8_t> seen(kN);
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{seen.data(), mem->ptr, kN}}).ok());
  ASSERT_EQ(seen, Pattern(kN, 7));
  std::vector<uint8_t> answer = Pattern(kN, 99);
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{mem->ptr, answer.data(), kN}}).ok());
  dev->CloseImported(*mem);
}

TEST(CudaIpcTest, ExportImportBetweenTwoProcesses) {
  REQUIRE_GPU(dev);
  constexpr size_t kN = 4 << 20;
  auto mem = dev->Allocate(kN);
  ASSERT_TRUE(mem.ok());
  std::vector<uint8_t> mine = Pattern(kN, 7);
  ASSERT_TRUE(dev->Copy(CopyKind::kHostToDevice, {{*mem, mine.data(), kN}}).ok());
  auto handle = dev->ExportHandle(*mem);
  ASSERT_TRUE(handle.ok()) << handle.status();
  // A fresh process (not a fork: CUDA does not survive fork).
  std::string self = std::filesystem::read_symlink("/proc/self/exe");
  std::string cmd = "KVTIER_GPU_IPC_HANDLE=" + absl::BytesToHexString(*handle) + " " + self +
                    " --gtest_filter=CudaIpcChild.* > /dev/null 2>&1";
  int rc = system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "child process failed: " << cmd;
  std::vector<uint8_t> now(kN);
  ASSERT_TRUE(dev->Copy(CopyKind::kDeviceToHost, {{now.data(), *mem, kN}}).ok());
  EXPECT_EQ(now, Pattern(kN, 99)) << "the child's write is visible here";
  dev->Free(*mem);
}

}  // namespace
}  // namespace kvtier::tiers::hbm
