// TierManager::ReadPages (tiers/store/page_reads.cc), the batched read of a GET
// range, over the NVMe tier on a memory device behind the fault injector:
// byte-exact pages, a corrupt page is a miss and only that, an I/O error is
// its page's alone, the reads really overlap, pins and holds are released,
// and promote_on_get still promotes.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/test_hooks.h"
#include "tests/unit/nvme_test_fixture.h"

namespace kvtier::tiers {
namespace {

// Holds async reads back until `gate` of them wait (or 20 ms pass), then
// lets them all go: a caller that issues reads one at a time never has
// more than one in flight, one that batches has `gate` at once.
class GateDevice final : public ForwardingDevice {
 public:
  GateDevice(std::unique_ptr<nvme::Device> inner, size_t gate)
      : ForwardingDevice(std::move(inner)), gate_(gate) {
    timer_ = std::thread([this] {
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        Release(0);
      }
    });
  }
  ~GateDevice() override {
    stop_ = true;
    timer_.join();
    Release(0);
  }

 protected:
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, nvme::IoCallback cb) override {
    {
      absl::MutexLock lock(&mu_);
      held_.push_back(Held{offset, buf, n, std::move(cb)});
    }
    Release(gate_);
  }

 private:
  struct Held {
    uint64_t offset;
    void* buf;
    uint64_t n;
    nvme::IoCallback cb;
  };
  // Lets every held read go once at least `at_least` are held.
  void Release(size_t at_least) {
    std::vector<Held> go;
    {
      absl::MutexLock lock(&mu_);
      if (held_.empty() || held_.size() < at_least) return;
      go.swap(held_);
    }
    for (Held& h : go) inner().ReadAsync(h.offset, h.buf, h.n, std::move(h.cb));
  }

  const size_t gate_;
  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread timer_;
};

// Records the I/O urgency token (io_class.h) each async read was issued
// with, by offset.
class UrgencyDevice final : public ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  IoUrgency TokenAt(uint64_t offset) {
    absl::MutexLock lock(&mu_);
    auto it = tokens_.find(offset);
    return it == tokens_.end() ? nullptr : it->second;
  }
  size_t reads() {
    absl::MutexLock lock(&mu_);
    return tokens_.size();
  }

 protected:
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, nvme::IoCallback cb) override {
    {
      absl::MutexLock lock(&mu_);
      tokens_[offset] = CurrentIoUrgency();
    }
    inner().ReadAsync(offset, buf, n, std::move(cb));
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, IoUrgency> tokens_ ABSL_GUARDED_BY(mu_);
};

class CountingHook final : public DemandReadHook {
 public:
  void BeginDemandRead() override { ++begun; }
  void EndDemandRead() override { ++ended; }
  int begun = 0, ended = 0;
};

class ReadBatchTest : public NvmeFaultTest {
 protected:
  // A host tier of `host_pages` over NVMe on a memory device (behind a
  // gate of 8 when `gated`) behind the fault injector, and `n` pages
  // PUT and then flushed to NVMe (host left empty).
  void OpenWith(uint64_t host_pages, uint64_t n, bool promote_on_get, bool gated = false,
                bool record_urgency = false) {
    auto inner = nvme::CreateMemoryDevice(NvmeConfig().capacity_bytes);
    memory_ = inner.get();
    if (record_urgency) {
      auto u = std::make_unique<UrgencyDevice>(std::move(inner));
      urgency_ = u.get();
      inner = std::move(u);
    }
    if (gated) {
      auto g = std::make_unique<GateDevice>(std::move(inner), 8);
      gate_ = g.get();
      inner = std::move(g);
    }
    TierManagerConfig config = NoThreadConfig();
    config.promote_on_get = promote_on_get;
    ASSERT_NO_FATAL_FAILURE(OpenFaulty(host_pages, std::move(inner), config));
    PutChain("a", 0, n);
    ASSERT_TRUE(mgr_->FlushToPersistent().ok());
    ASSERT_EQ(Snap(1).pages, n);
    ASSERT_EQ(Snap(0).pages, 0u);
  }

  // What ReadPages handed over, per page: bytes copied, or the status.
  struct Got {
    int calls = 0;
    std::vector<uint8_t> bytes;
    absl::Status status;
  };
  std::vector<Got> ReadAll(std::vector<PagePin>& pins, const ReadOptions& options = {}) {
    std::vector<Got> got(pins.size());
    mgr_->ReadPages(absl::MakeSpan(pins), options,
                    [&](size_t i, absl::StatusOr<const uint8_t*> bytes) {
                      ++got[i].calls;
                      got[i].status = bytes.status();
                      if (bytes.ok()) got[i].bytes.assign(*bytes, *bytes + kPage);
                    });
    return got;
  }

  // Corrupts page i's bytes on the device (below the fault injector).
  void Corrupt(uint64_t i) {
    auto pin = mgr_->PinForRead(ns_["a"], Key(i));
    ASSERT_TRUE(pin.has_value());
    std::unique_ptr<uint8_t, decltype(&std::free)> junk(
        static_cast<uint8_t*>(std::aligned_alloc(nvme::kBlockSize, nvme::kBlockSize)), &std::free);
    std::memset(junk.get(), 0xAB, nvme::kBlockSize);
    ASSERT_TRUE(memory_->Write(pin->slot().offset, junk.get(), nvme::kBlockSize).ok());
  }

  nvme::Device* memory_ = nullptr;
  GateDevice* gate_ = nullptr;
  UrgencyDevice* urgency_ = nullptr;
};

TEST_F(ReadBatchTest, ManyNvmePagesInOneBatchAreByteExact) {
  OpenWith(4, 40, /*promote_on_get=*/false);
  std::vector<PagePin> pins = PinAll(40);
  const uint64_t read_before = Snap(1).io.bytes_read;
  CountingHook hook;
  std::vector<Got> got = ReadAll(pins, ReadOptions{.demand = &hook});
  for (uint64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(got[i].calls, 1) << i;
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status;
    EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << "page " << i;
    EXPECT_TRUE(pins[i].valid());
  }
  EXPECT_EQ(hook.begun, 1);  // one demand read for the whole batch
  EXPECT_EQ(hook.ended, 1);
  EXPECT_EQ(Snap(1).pages, 40u);  // no promotion: they stay on NVMe
  EXPECT_EQ(Snap(1).io.bytes_read - read_before, 40 * kPage);
  EXPECT_EQ(Snap(1).checksum_errors, 0u);
}

TEST_F(ReadBatchTest, RamPagesNeedNoDemandRead) {
  OpenWith(64, 8, /*promote_on_get=*/true);
  std::vector<PagePin> pins = PinAll(8);
  ASSERT_EQ(ReadAll(pins)[0].status, absl::OkStatus());  // now all in RAM
  std::vector<PagePin> again = PinAll(8);
  CountingHook hook;
  std::vector<Got> got = ReadAll(again, ReadOptions{.demand = &hook});
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
  EXPECT_EQ(hook.begun, 0);
}

TEST_F(ReadBatchTest, CorruptPageIsAMissAndTheOthersAreServed) {
  for (bool promote : {false, true}) {
    SCOPED_TRACE(promote ? "promote_on_get" : "bounce");
    mgr_.reset();
    std::filesystem::remove_all(dir_);
    OpenWith(64, 32, promote);
    Corrupt(16);
    std::vector<PagePin> pins = PinAll(32);
    std::vector<Got> got = ReadAll(pins);
    for (uint64_t i = 0; i < 32; ++i) {
      EXPECT_EQ(got[i].calls, 1) << i;
      if (i == 16) {
        EXPECT_TRUE(absl::IsDataLoss(got[i].status)) << got[i].status;
        EXPECT_FALSE(pins[i].valid()) << "a corrupt page's pin is reset (a miss)";
        continue;
      }
      ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status;
      EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << "page " << i;
    }
    EXPECT_EQ(Snap(1).checksum_errors, 1u);
    pins.clear();
    EXPECT_FALSE(testing::Has(*mgr_, ns_["a"], 16)) << "the corrupt page was dropped";
    EXPECT_EQ(Snap(0).pages + Snap(1).pages, 31u);
    EXPECT_EQ(Snap(0).pages, promote ? 31u : 0u);
  }
}

TEST_F(ReadBatchTest, IoErrorIsReportedForItsPageOnly) {
  OpenWith(4, 32, /*promote_on_get=*/false);
  std::vector<PagePin> pins = PinAll(32);
  faults_->Set(nvme::FaultSpec{.fail_read_n = 5, .read_fault = nvme::FaultKind::kEnospc});
  std::vector<Got> got = ReadAll(pins);
  int errors = 0;
  for (uint64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(got[i].calls, 1) << i;
    if (!got[i].status.ok()) {
      ++errors;
      EXPECT_TRUE(absl::IsResourceExhausted(got[i].status)) << got[i].status;
      EXPECT_TRUE(pins[i].valid()) << "an I/O error is not a corrupt page";
      continue;
    }
    EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << "page " << i;
  }
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(faults_->faults_injected(), 1u);
  EXPECT_EQ(Snap(1).pages, 32u);  // nothing dropped
  EXPECT_EQ(Snap(1).checksum_errors, 0u);
}

TEST_F(ReadBatchTest, ReadsOverlap) {
  for (bool promote : {false, true}) {
    SCOPED_TRACE(promote ? "promote_on_get" : "bounce");
    mgr_.reset();
    std::filesystem::remove_all(dir_);
    OpenWith(64, 32, promote, /*gated=*/true);
    std::vector<PagePin> pins = PinAll(32);
    std::vector<Got> got = ReadAll(pins);
    for (uint64_t i = 0; i < 32; ++i) ASSERT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
    EXPECT_GE(gate_->stats().max_inflight, 8u) << "reads were issued one at a time";
    EXPECT_EQ(Snap(0).pages, promote ? 32u : 0u);
  }
}

// The prefetcher's batch (TierManager::PromotePinned): every read in flight
// at once, whatever promote_on_get says; each page's outcome reported once:
// promoted (still pinned, bytes exact), busy (a GET reads it), failed
// (corrupt: dropped), missing (no pin); none read into a bounce buffer.
TEST_F(ReadBatchTest, PromotePinnedReadsTogetherAndReportsEachPage) {
  OpenWith(64, 32, /*promote_on_get=*/false, /*gated=*/true);
  Corrupt(5);
  std::optional<PagePin> reader = mgr_->PinForRead(ns_["a"], Key(9));
  ASSERT_TRUE(reader.has_value());
  std::vector<PagePin> pins(33);  // the last one: a key that is not stored
  for (uint64_t i = 0; i < 32; ++i) {
    auto pin = mgr_->PinForPromotion(ns_["a"], Key(i));
    ASSERT_TRUE(pin.has_value()) << i;
    pins[i] = *std::move(pin);
  }
  const uint64_t read_before = Snap(1).io.bytes_read;
  std::vector<int> calls(33, 0);
  std::vector<PromoteOutcome> outcome(33);
  mgr_->PromotePinned(absl::MakeSpan(pins), 0, EvictMode::kMayWrite,
                      [&](size_t i, PromoteOutcome o) {
                        ++calls[i];
                        outcome[i] = o;
                      });
  for (uint64_t i = 0; i < 33; ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    if (i == 5 || i == 9 || i == 32) continue;
    ASSERT_EQ(outcome[i], PromoteOutcome::kPromoted) << i;
    ASSERT_TRUE(pins[i].valid() && pins[i].data() != nullptr) << i;
    EXPECT_TRUE(std::equal(pins[i].data(), pins[i].data() + kPage, Bytes(kPage, i).begin())) << i;
  }
  EXPECT_EQ(outcome[5], PromoteOutcome::kFailed);
  EXPECT_FALSE(pins[5].valid());
  EXPECT_EQ(outcome[9], PromoteOutcome::kBusy);
  EXPECT_FALSE(pins[9].valid());
  EXPECT_EQ(outcome[32], PromoteOutcome::kMissing);
  EXPECT_GE(gate_->stats().max_inflight, 8u) << "promotions were read one at a time";
  EXPECT_EQ(Snap(0).pages, 30u);
  EXPECT_EQ(Snap(1).checksum_errors, 1u);
  EXPECT_EQ(Snap(1).io.bytes_read - read_before, 31 * kPage) << "no bounce read of the busy page";
  // Up already: said so, still pinned.
  std::vector<PagePin> again(1);
  again[0] = *mgr_->PinForPromotion(ns_["a"], Key(0));
  pins.clear();
  mgr_->PromotePinned(absl::MakeSpan(again), 0, EvictMode::kMayWrite, [&](size_t, PromoteOutcome o) {
    EXPECT_EQ(o, PromoteOutcome::kAlreadyThere);
  });
  EXPECT_TRUE(again[0].valid());
}

// The prefetcher hands PromotePinned one urgency token per job; each page's
// device read is issued with its own job's token (so a GET joining that job
// escalates that read alone), and none where no token was given.
TEST_F(ReadBatchTest, PromotePinnedIssuesEachReadWithItsJobsToken) {
  OpenWith(64, 8, /*promote_on_get=*/false, /*gated=*/false, /*record_urgency=*/true);
  std::vector<PagePin> pins(8);
  std::vector<uint64_t> offsets(8);
  std::vector<IoUrgency> tokens(8);
  for (uint64_t i = 0; i < 8; ++i) {
    auto pin = mgr_->PinForPromotion(ns_["a"], Key(i));
    ASSERT_TRUE(pin.has_value()) << i;
    offsets[i] = pin->slot().offset;
    pins[i] = *std::move(pin);
    if (i != 3) tokens[i] = std::make_shared<std::atomic<bool>>(i % 2 == 0);
  }
  const size_t reads_before = urgency_->reads();
  std::vector<PromoteOutcome> outcome(8);
  mgr_->PromotePinned(
      absl::MakeSpan(pins), 0, EvictMode::kMayWrite,
      [&](size_t i, PromoteOutcome o) { outcome[i] = o; }, tokens);
  EXPECT_EQ(urgency_->reads() - reads_before, 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(outcome[i], PromoteOutcome::kPromoted) << i;
    EXPECT_EQ(urgency_->TokenAt(offsets[i]), tokens[i]) << "page " << i;
  }
  EXPECT_EQ(CurrentIoUrgency(), nullptr) << "the token outlived the read that carried it";
}

TEST_F(ReadBatchTest, BounceBytesBoundTheReadsInFlight) {
  OpenWith(4, 32, /*promote_on_get=*/false, /*gated=*/true);
  std::vector<PagePin> pins = PinAll(32);
  std::vector<Got> got = ReadAll(pins, ReadOptions{.max_bounce_bytes = 4 * kPage});
  for (uint64_t i = 0; i < 32; ++i) ASSERT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
  EXPECT_LE(gate_->stats().max_inflight, 4u);
}

TEST_F(ReadBatchTest, PinsAndHoldsAreReleased) {
  OpenWith(64, 32, /*promote_on_get=*/true);
  Corrupt(3);
  // A lease's hold does not stop the promotion (it reads nothing).
  std::optional<PagePin> hold = mgr_->HoldForLease(ns_["a"], Key(7));
  ASSERT_TRUE(hold.has_value());
  {
    std::vector<PagePin> pins = PinAll(32);
    std::vector<Got> got = ReadAll(pins);
    EXPECT_TRUE(absl::IsDataLoss(got[3].status));
    EXPECT_EQ(got[7].bytes, Bytes(kPage, 7));
    EXPECT_EQ(Snap(0).pinned_pages, 31u);  // the GET's pins moved up with their pages
  }
  EXPECT_EQ(mgr_->Locate(ns_["a"], Key(7)), 0) << "a held page is still promoted";
  EXPECT_EQ(Snap(0).pinned_pages, 1u);  // the hold
  hold.reset();
  EXPECT_EQ(Snap(0).pinned_pages, 0u);
  EXPECT_EQ(Snap(1).pinned_pages, 0u);
}

TEST_F(ReadBatchTest, PromoteOnGetStillPromotes) {
  OpenWith(64, 32, /*promote_on_get=*/true);
  // One page is read by someone else at the same time: it cannot move (a
  // busy page), so it is served from a bounce buffer and stays on NVMe.
  std::optional<PagePin> reader = mgr_->PinForRead(ns_["a"], Key(9));
  std::vector<PagePin> pins = PinAll(32);
  std::vector<Got> got = ReadAll(pins);
  for (uint64_t i = 0; i < 32; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status;
    EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
    EXPECT_EQ(pins[i].tier(), i == 9 ? TierKind::kNvme : TierKind::kHost) << i;
  }
  EXPECT_EQ(Snap(0).promotions, 31u);
  EXPECT_EQ(Snap(0).pages, 31u);
  // Inclusive NVMe: promoted pages keep their copy there, clean.
  EXPECT_EQ(Snap(0).clean_pages, 31u);
  // Not with promotion turned off for the read.
  pins.clear();
  reader.reset();
  std::vector<PagePin> again = PinAll(32);
  got = ReadAll(again, ReadOptions{.promote = false});
  EXPECT_EQ(got[9].bytes, Bytes(kPage, 9));
  EXPECT_EQ(again[9].tier(), TierKind::kNvme);
}

TEST_F(ReadBatchTest, PromotionWithoutCleanRoomFallsBackToBounce) {
  OpenWith(4, 32, /*promote_on_get=*/true);
  std::vector<PagePin> pins = PinAll(32);
  std::vector<Got> got = ReadAll(pins);
  for (uint64_t i = 0; i < 32; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status;
    EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
  }
  // As many as fit (the GET pins them all, so none can make room for the
  // next); the rest came through bounce buffers.
  EXPECT_EQ(Snap(0).pages, 4u);
  EXPECT_EQ(Snap(1).pages, 28u);
}

// A DELETE lands while a batch promotes the page (between its read and the
// switch): the promotion is undone, the GET still gets the page's bytes
// (read again from its old slot, which the GET's pin keeps), and the entry
// is freed with that pin.
TEST_F(ReadBatchTest, DeleteDuringPromotionStillServesThePage) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "needs sync points (-DKVTIER_TEST_HOOKS=ON)";
  OpenWith(64, 32, /*promote_on_get=*/true);
  auto& sp = test_hooks::SyncPoints::Get();
  std::atomic<bool> raced{false};
  sp.SetCallback("promote.after_read", [&](void* arg) {
    if (*static_cast<PageKey*>(arg) != Key(5) || raced.exchange(true)) return;
    EXPECT_TRUE(mgr_->Delete(ns_["a"], Key(5)));
  });
  sp.EnableProcessing();
  std::vector<PagePin> pins = PinAll(32);
  std::vector<Got> got = ReadAll(pins);
  sp.DisableProcessing();
  sp.ClearAll();
  ASSERT_TRUE(raced);
  for (uint64_t i = 0; i < 32; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status;
    EXPECT_EQ(got[i].bytes, Bytes(kPage, i)) << i;
  }
  EXPECT_EQ(Snap(0).promotions, 31u);
  pins.clear();
  EXPECT_FALSE(testing::Has(*mgr_, ns_["a"], 5));
  EXPECT_EQ(Snap(0).pages + Snap(1).pages, 31u);
  EXPECT_EQ(Snap(0).pinned_pages + Snap(1).pinned_pages, 0u);
  // Its NVMe slot went with it; the promoted pages keep their NVMe copies.
  EXPECT_EQ(Snap(1).used_bytes, 31 * kPage);
}

}  // namespace
}  // namespace kvtier::tiers
