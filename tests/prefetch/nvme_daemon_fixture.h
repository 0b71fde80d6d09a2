// The fixture of the prefetch integration tests: a real kvtierd with 4 MiB
// of host RAM over a 64 MiB NVMe tier, the lookahead on, and 20 chains of 8
// small pages (10 MiB) put through one registered buffer, so the oldest
// chains end up on NVMe and the newest in RAM.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "client/wire_calls.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {

class NvmeChainsTest : public DaemonTest {
 protected:
  static constexpr uint64_t kPage = kSmallPageBytes;
  static constexpr size_t kLen = 8;  // pages per chain
  static constexpr uint64_t kChains = 20;

  // Chain ch's keys come from seed first_seed + ch (each test file its own
  // keys); the buffer holds one chain and `spare_bytes` more.
  NvmeChainsTest(uint64_t first_seed, uint64_t spare_bytes)
      : first_seed_(first_seed), spare_bytes_(spare_bytes) {}

  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--host_bytes=4MiB", "--host_slab_bytes=1MiB", "--prefetch_lookahead=true",
                      "--prefetch_lease_ms=20000"},
            .nvme = true};
  }
  void SetUp() override {
    DaemonTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    c_ = Connect();
    ASSERT_TRUE(c_);
    auto buf = ShmBuffer::Create(kLen * kPage + spare_bytes_);
    ASSERT_TRUE(buf.ok()) << buf.status();
    buf_ = *std::move(buf);
    auto id = c_->RegisterBuffer(buf_->name(), buf_->size());
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    for (uint64_t ch = 0; ch < kChains; ++ch) {
      chains_.push_back(MakeChain(SmallLayout(), first_seed_ + ch, kLen));
      for (size_t i = 0; i < kLen; ++i) tools::FillPattern(chains_.back()[i], Page(i), kPage);
      auto put = c_->Put(chains_.back(), PageKey::Zero(), id_, Offsets(kLen));
      ASSERT_TRUE(put.ok()) << put.status();
      ASSERT_EQ(put->stored, kLen);
    }
    std::memset(buf_->data(), 0, buf_->size());
  }
  void TearDown() override {
    c_.reset();
    DaemonTest::TearDown();
  }

  uint8_t* Page(size_t i) { return buf_->data() + i * kPage; }
  wire::PrefetchStats Prefetch() {
    auto s = WireStats(*c_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->prefetch() : wire::PrefetchStats();
  }
  // Polls STATS until pred holds (up to 10 s).
  bool WaitStats(const std::function<bool(const wire::PrefetchStats&)>& pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred(Prefetch())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<Client> c_;
  std::unique_ptr<ShmBuffer> buf_;
  BufferId id_ = 0;
  std::vector<std::vector<PageKey>> chains_;

 private:
  const uint64_t first_seed_;
  const uint64_t spare_bytes_;
};

}  // namespace kvtier::itest
