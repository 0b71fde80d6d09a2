// Shared by the prefetch unit tests: a real TierManager over a small host
// tier and an NVMe tier (memory device, real RocksDB index under /tmp), pages
// pushed down to NVMe, and a bounded wait for asynchronous outcomes.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kvtier/test_hooks.h"
#include "prefetch/prefetcher.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::prefetch::testing {

using tiers::testing::Bytes;
using tiers::testing::Key;

inline constexpr uint64_t kPage = 64 << 10;
inline constexpr uint64_t kSlab = 1 << 20;

// First line of a test that drives sync points: they exist only in builds
// with KVTIER_TEST_HOOKS (scripts/test.sh makes one).
#define KVTIER_REQUIRE_SYNC_POINTS()                                            \
  do {                                                                          \
    if (!::kvtier::test_hooks::kEnabled)                                        \
      GTEST_SKIP() << "needs sync points: build with -DKVTIER_TEST_HOOKS=ON";   \
  } while (0)

// Polls `pred` every millisecond for up to `ms`.
inline bool WaitFor(const std::function<bool()>& pred, int ms = 5000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

class PrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-prefetch-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    test_hooks::SyncPoints::Get().ClearAll();
  }
  void TearDown() override {
    test_hooks::SyncPoints::Get().DisableProcessing();
    test_hooks::SyncPoints::Get().ClearAll();
    pf_.reset();
    mgr_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Host tier of `host_pages` pages over a 16 MiB NVMe tier; no evictor
  // thread, so only the test moves pages down.
  void Open(uint64_t host_pages) {
    std::vector<std::unique_ptr<tiers::Tier>> t;
    t.push_back(tiers::testing::HostTier(host_pages * kPage, kPage));
    tiers::NvmeTierConfig nc;
    nc.dir = dir_.string();
    nc.capacity_bytes = 16 * kSlab;
    nc.slab_bytes = kSlab;
    auto nvme = tiers::CreateNvmeTier(nc, tiers::nvme::CreateMemoryDevice(nc.capacity_bytes));
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    t.push_back(*std::move(nvme));
    auto m = tiers::TierManager::Create(tiers::testing::NoThreadConfig(), std::move(t));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    ns_ = tiers::testing::AddNs(*mgr_, "a");
  }

  void StartPrefetcher(PrefetcherConfig c) {
    auto p = Prefetcher::Create(c, mgr_.get());
    ASSERT_TRUE(p.ok()) << p.status();
    pf_ = *std::move(p);
  }
  static PrefetcherConfig Config(uint32_t threads = 1) {
    PrefetcherConfig c;
    c.io_threads = threads;
    c.policy.default_lease = absl::Seconds(30);
    c.watch_period = absl::Milliseconds(5);
    c.max_pinned_bytes = 64 * kPage;  // tests that want backpressure lower it
    return c;
  }

  // Stores pages first..first+n-1 as a chain and demotes every host page.
  void PutOnNvme(uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; ++i) {
      PageKey parent = i == first ? PageKey::Zero() : Key(i - 1);
      ASSERT_TRUE(tiers::testing::Put(*mgr_, ns_, Key(i), parent, Bytes(kPage, i)).ok());
    }
    mgr_->EvictTo(0, 0);
    for (uint64_t i = first; i < first + n; ++i) ASSERT_EQ(mgr_->Locate(ns_, Key(i)), 1) << i;
  }

  std::vector<PageKey> Keys(uint64_t first, uint64_t n) const {
    std::vector<PageKey> k;
    for (uint64_t i = first; i < first + n; ++i) k.push_back(Key(i));
    return k;
  }

  Hint HintFor(int32_t priority = 0, absl::Duration lease = absl::ZeroDuration()) const {
    return Hint{.cls = JobClass::kHint, .priority = priority, .lease = lease};
  }

  // The page's bytes, read through a GET-style pin, equal what was PUT.
  bool Intact(uint64_t i) {
    auto pin = mgr_->PinForRead(ns_, Key(i));
    if (!pin) return false;
    std::vector<uint8_t> got(kPage);
    if (!pin->CopyTo(got.data()).ok()) return false;
    return got == Bytes(kPage, i);
  }

  uint64_t HostPinned() const { return mgr_->Snapshot().tiers[0].pinned_pages; }

  std::filesystem::path dir_;
  std::unique_ptr<tiers::TierManager> mgr_;
  std::unique_ptr<Prefetcher> pf_;
  tiers::NamespaceId ns_ = 0;
};

}  // namespace kvtier::prefetch::testing
