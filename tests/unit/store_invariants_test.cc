// Regressions of issue 11, against the store over a real NVMe tier (file +
// RocksDB): one durable record per key under concurrent PUTs of shared keys,
// a failed sync is never a dedup, the request path never does disk I/O,
// promotion keeps the NVMe copy (inclusive tier) so flushed pages survive a
// clean restart, long namespace names persist, and interleavings forced with
// sync points where those bugs lived.
#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "kvtier/test_hooks.h"
#include "tests/unit/nvme_test_fixture.h"
#include "tiers/common/io_guard.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::tiers {
namespace {

using StoreInvariantsTest = NvmeTierTest;
using StoreFaultTest = NvmeFaultTest;

// Reserves and fills each key (dedups skipped), then commits them together,
// as the daemon's PUT does. Returns the keys acknowledged (stored or dedup).
struct PutOutcomes {
  size_t stored = 0, deduplicated = 0, not_stored = 0;
};
PutOutcomes PutBatch(TierManager& m, NamespaceId ns, const std::vector<uint64_t>& keys) {
  PutOutcomes out;
  std::vector<Reservation> rs;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = m.Reserve(ns, Key(keys[i]), i == 0 ? PageKey::Zero() : Key(keys[i - 1]), kPage);
    if (!r.ok()) {
      out.not_stored += keys.size() - i;
      break;
    }
    if (r->outcome == PutOutcome::kDeduplicated) {
      ++out.deduplicated;
      continue;
    }
    const std::vector<uint8_t> bytes = Bytes(kPage, keys[i]);
    EXPECT_TRUE(r->reservation.Fill(bytes.data()).ok());
    rs.push_back(std::move(r->reservation));
  }
  CommitResult c = Reservation::CommitAll(rs);
  out.stored = c.stored;
  out.not_stored += c.not_stored;
  return out;
}

TEST_F(StoreInvariantsTest, RepeatedKeyInOnePutIsStoredOnceAndSurvivesRestart) {
  write_through_ = true;
  Open(/*host_pages=*/16);
  PutOutcomes o = PutBatch(*mgr_, ns_["a"], {7, 7, 8});  // PUT [A, A, B]
  EXPECT_EQ(o.stored, 2u);
  EXPECT_EQ(o.deduplicated, 1u);
  Open(16);  // restart
  std::vector<uint8_t> got;
  for (uint64_t k : {7, 8}) {
    ASSERT_TRUE(Get("a", k, &got).ok()) << k;
    EXPECT_EQ(got, Bytes(kPage, k));
  }
  EXPECT_EQ(Snap(1).durable.dropped_records, 0u);
}

// Four sessions PUT chains that share a system prompt, pairwise-shared pages
// and private tails, at once, write-through. After a restart every
// acknowledged page is served with its own bytes and no record is invalid.
TEST_F(StoreInvariantsTest, ConcurrentPutsOfSharedPrefixesLoseNothingAcrossRestart) {
  write_through_ = true;
  Open(/*host_pages=*/12);
  std::mutex mu;
  std::set<uint64_t> acked;
  std::vector<std::thread> sessions;
  for (int s = 0; s < 4; ++s) {
    sessions.emplace_back([&, s] {
      std::mt19937_64 rng(s + 1);
      for (int round = 0; round < 25; ++round) {
        std::vector<uint64_t> chain = {1, 2, 3};                      // shared by all
        chain.push_back(100 + (s / 2) * 10 + rng() % 3);              // pairwise
        chain.push_back(1000 + s * 100 + round);                      // private
        if (round % 5 == 0) chain.push_back(chain.back());            // [.., A, A]
        PutOutcomes o = PutBatch(*mgr_, ns_["a"], chain);
        if (o.not_stored != 0) continue;  // NVMe full: no promise was made
        std::lock_guard<std::mutex> lock(mu);
        acked.insert(chain.begin(), chain.end());
      }
    });
  }
  for (auto& t : sessions) t.join();
  ASSERT_GT(acked.size(), 50u);
  Open(12);
  std::vector<uint8_t> got;
  for (uint64_t k : acked) {
    absl::StatusOr<TierKind> served = Get("a", k, &got);
    ASSERT_TRUE(served.ok()) << "acknowledged page " << k << " lost: " << served.status();
    EXPECT_EQ(got, Bytes(kPage, k)) << "page " << k;
  }
  EXPECT_EQ(Snap(1).durable.dropped_records, 0u);
  EXPECT_EQ(Snap(1).checksum_errors, 0u);
}

// A page deleted while a reader held it, then PUT again onto NVMe: when the
// reader lets go, freeing the old slot must not delete the new copy's record.
TEST_F(StoreInvariantsTest, FreeingAnOldSlotKeepsTheNewRecordOfItsKey) {
  Open(/*host_pages=*/1);
  PutChain("a", 0, 1);                       // key 0 in host
  PutChain("a", 1, 1);                       // host full: key 1 on NVMe
  ASSERT_EQ(mgr_->Locate(ns_["a"], Key(1)), 1);
  std::optional<PagePin> reader = mgr_->PinForRead(ns_["a"], Key(1));
  ASSERT_TRUE(reader.has_value());
  ASSERT_TRUE(mgr_->Delete(ns_["a"], Key(1)));
  PutChain("a", 1, 1);                       // again, into another NVMe slot
  reader.reset();                            // the old slot goes now
  Open(1);
  std::vector<uint8_t> got;
  ASSERT_TRUE(Get("a", 1, &got).ok());
  EXPECT_EQ(got, Bytes(kPage, 1));
}

TEST_F(StoreFaultTest, FailedSyncIsNotStoredNeverADedup) {
  write_through_ = true;
  OpenFaulty(/*host_pages=*/16);
  faults_->Set(nvme::FaultSpec{.fail_flush_n = 1});
  PutOutcomes o = PutBatch(*mgr_, ns_["a"], {1, 2, 3});
  EXPECT_EQ(o.stored, 0u);
  EXPECT_EQ(o.deduplicated, 0u);
  EXPECT_EQ(o.not_stored, 3u);
  EXPECT_EQ(mgr_->Lookup(ns_["a"], {Key(1)}).hits, 0u);
  EXPECT_EQ(Snap(0).durability_failures, 3u);
  // The keys were released: the next PUT stores them.
  o = PutBatch(*mgr_, ns_["a"], {1, 2, 3});
  EXPECT_EQ(o.stored, 3u);
}

TEST_F(StoreFaultTest, FailedSyncOfAPageLandingOnNvmeIsNotStored) {
  OpenFaulty(/*host_pages=*/1);
  PutChain("a", 0, 1);  // host full
  faults_->Set(nvme::FaultSpec{.fail_flush_n = 1});
  PutOutcomes o = PutBatch(*mgr_, ns_["a"], {5});
  EXPECT_EQ(o.stored, 0u);
  EXPECT_EQ(o.not_stored, 1u);
  EXPECT_EQ(Snap(1).durability_failures, 1u);
}

// What the frontend does — LOOKUP, pin for GET, PUT over a host quota and
// into a full RAM tier, DELETE of NVMe pages — causes no disk I/O on its
// thread; a GET's read (a copy worker) of an NVMe page while RAM holds no
// clean page writes nothing either.
TEST_F(StoreInvariantsTest, FrontendPathsDoNoDiskIo) {
  Open(/*host_pages=*/8, {"a"});
  NamespaceConfig q{"q", {{TierKind::kHost, 2 * kPage}}};
  ns_["q"] = *mgr_->AddNamespace(q);
  PutChain("a", 0, 6);
  std::vector<Reservation> pending;
  {
    NoDiskIoScope frontend;
    for (uint64_t k = 100; k < 106; ++k) {  // "q" is over its quota after two
      auto r = mgr_->Reserve(ns_["q"], Key(k), PageKey::Zero(), kPage);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->outcome, PutOutcome::kReserved);
      pending.push_back(std::move(r->reservation));
    }
    EXPECT_EQ(mgr_->Lookup(ns_["a"], {Key(0), Key(1)}).hits, 2u);
  }
  EXPECT_EQ(pending[2].tier(), TierKind::kNvme);  // landed below, not demoted inline
  for (size_t i = 0; i < pending.size(); ++i) {  // the copy worker's part
    ASSERT_TRUE(pending[i].Fill(Bytes(kPage, 100 + i).data()).ok());
  }
  EXPECT_EQ(Reservation::CommitAll(pending).stored, 6u);
  {
    NoDiskIoScope frontend;
    EXPECT_TRUE(mgr_->Delete(ns_["q"], Key(105)));  // an NVMe page: record deletion deferred
    std::optional<PagePin> pin = mgr_->PinForRead(ns_["q"], Key(104));
    ASSERT_TRUE(pin.has_value());
  }
  EXPECT_EQ(Snap(1).io.forbidden_io, 0u);
  // A GET of an NVMe page with RAM full of dirty pages: read, not promoted.
  PutChain("a", 6, 2);
  const uint64_t written = Snap(1).io.bytes_written;
  std::optional<PagePin> pin = mgr_->PinForRead(ns_["q"], Key(103));
  ASSERT_TRUE(pin.has_value());
  std::vector<uint8_t> bounce;
  absl::StatusOr<const uint8_t*> src = mgr_->ReadPage(*pin, bounce, {});
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(std::vector<uint8_t>(*src, *src + kPage), Bytes(kPage, 103));
  EXPECT_EQ(Snap(1).io.bytes_written, written);
  pin.reset();
  // The deferred deletion happens on the evictor's next pass: gone after a restart.
  mgr_->EvictTo(1, Snap(1).capacity_bytes);
  Open(8, {"a", "q"});
  EXPECT_EQ(mgr_->Locate(ns_["q"], Key(105)), -1);
  EXPECT_NE(mgr_->Locate(ns_["q"], Key(104)), -1);
}

// Cleaning writes cold pages back ahead of need; then a full RAM tier makes
// room by dropping clean pages (no write), and a page promoted back from
// NVMe keeps its copy there, so demoting it again writes nothing.
TEST_F(StoreInvariantsTest, CleanPagesLeaveRamWithoutWritesAndPromotionIsInclusive) {
  Open(/*host_pages=*/10);
  PutChain("a", 0, 10);
  EXPECT_GT(mgr_->Clean(0), 0u);
  const uint64_t clean = Snap(0).clean_pages;
  ASSERT_GT(clean, 0u);
  const uint64_t written = Snap(1).io.bytes_written;
  PutChain("a", 10, clean);  // room comes from dropping clean copies
  EXPECT_EQ(Snap(1).io.bytes_written, written);
  EXPECT_EQ(Snap(0).pages, 10u);
  EXPECT_EQ(Snap(1).pages, clean);
  // Promote one back (clean room: clean one more first), then demote it.
  ASSERT_GT(mgr_->Clean(0), 0u);
  std::vector<uint8_t> got;
  ASSERT_EQ(*Get("a", 0, &got), TierKind::kNvme);
  EXPECT_EQ(Snap(0).promotions, 1u);
  EXPECT_EQ(mgr_->Locate(ns_["a"], Key(0)), 0);
  const uint64_t before = Snap(1).io.bytes_written;
  mgr_->EvictTo(0, 0);  // everything to NVMe; clean pages cost nothing
  EXPECT_EQ(Snap(0).pages, 0u);
  const uint64_t dirty_bytes = (10 - Snap(0).clean_pages) * kPage;
  EXPECT_LE(Snap(1).io.bytes_written - before, dirty_bytes);
  for (uint64_t i = 0; i < 10 + clean; ++i) {
    ASSERT_TRUE(Get("a", i, &got).ok()) << i;
    ASSERT_EQ(got, Bytes(kPage, i)) << i;
  }
}

// Issue 11, item 4: FLUSH, then a LOOKUP whose lookahead promotes the pages,
// then a clean shutdown: the NVMe copies stay, so every page survives.
TEST_F(StoreInvariantsTest, FlushedPagesSurviveLookaheadPromotionAndRestart) {
  Open(/*host_pages=*/16);
  PutChain("a", 0, 4);
  ASSERT_EQ(*mgr_->FlushToPersistent(), 4u);
  std::vector<PageKey> keys = {Key(0), Key(1), Key(2), Key(3)};
  for (PromoteResult& r : mgr_->PromoteBatch(ns_["a"], keys, 0)) {
    EXPECT_EQ(r.outcome, PromoteOutcome::kPromoted);
  }
  EXPECT_EQ(Snap(0).pages, 4u);
  Open(16);
  EXPECT_EQ(Snap(1).pages, 4u);
  std::vector<uint8_t> got;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(Get("a", i, &got).ok()) << i;
    EXPECT_EQ(got, Bytes(kPage, i));
  }
}

TEST_F(StoreInvariantsTest, NamespaceNamesOfEveryAcceptedLengthPersist) {
  const std::string long_name(256, 'n');
  Open(/*host_pages=*/1, {"a", long_name});
  PutChain(long_name, 0, 3);  // two land on NVMe
  ASSERT_GT(Snap(1).pages, 0u);
  const uint64_t on_nvme = Snap(1).pages;
  Open(1, {"a", long_name});
  EXPECT_EQ(Snap(1).pages, on_nvme);
  EXPECT_EQ(Snap(1).durable.dropped_records, 0u);
  for (size_t len : {1, 100, 254, 255, 256, 300, 4096}) {
    const std::string ns(len, 'x');
    nvme::IndexRecord r{ns, Key(9), Key(8), 4096, 123, 77, 5};
    nvme::IndexRecord back;
    ASSERT_TRUE(nvme::NvmeIndex::Decode(nvme::NvmeIndex::EncodeKey(ns, Key(9)),
                                        nvme::NvmeIndex::EncodeValue(r), &back))
        << len;
    EXPECT_EQ(back.ns, ns);
    EXPECT_EQ(back.key, Key(9));
  }
}

// The demotion of K has written and recorded K's NVMe copy; before it
// switches the entry, K is deleted and PUT again straight onto NVMe. The
// abandoned demotion must free its copy without deleting the new record.
TEST_F(StoreInvariantsTest, DemotionRacingDeleteAndRePutKeepsTheNewCopy) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "needs sync points (-DKVTIER_TEST_HOOKS=ON)";
  Open(/*host_pages=*/1);
  PutChain("a", 0, 1);
  auto& sp = test_hooks::SyncPoints::Get();
  std::atomic<bool> raced{false};
  sp.SetCallback("move.before_switch", [&](void* arg) {
    if (*static_cast<PageKey*>(arg) != Key(0) || raced.exchange(true)) return;
    EXPECT_TRUE(mgr_->Delete(ns_["a"], Key(0)));
    PutChain("a", 0, 1);  // the host slot is still ours: this lands on NVMe
  });
  sp.EnableProcessing();
  mgr_->EvictTo(0, 0);
  sp.DisableProcessing();
  sp.ClearAll();
  ASSERT_TRUE(raced);
  Open(1);
  std::vector<uint8_t> got;
  ASSERT_TRUE(Get("a", 0, &got).ok());
  EXPECT_EQ(got, Bytes(kPage, 0));
}

// Two PUTs of one key race through Commit: the second reaches Reserve while
// the first is between persist and publish. It must be a dedup, not a second
// durable record.
TEST_F(StoreInvariantsTest, ReserveDuringAnotherCommitOfTheKeyIsADedup) {
  if (!test_hooks::kEnabled) GTEST_SKIP() << "needs sync points (-DKVTIER_TEST_HOOKS=ON)";
  write_through_ = true;
  Open(/*host_pages=*/4);
  auto& sp = test_hooks::SyncPoints::Get();
  PutOutcomes second;
  sp.SetCallback("reservation.before_publish", [&](void* arg) {
    if (*static_cast<PageKey*>(arg) != Key(3)) return;
    sp.ClearCallback("reservation.before_publish");
    second = PutBatch(*mgr_, ns_["a"], {3});
  });
  sp.EnableProcessing();
  PutOutcomes first = PutBatch(*mgr_, ns_["a"], {3});
  sp.DisableProcessing();
  sp.ClearAll();
  EXPECT_EQ(first.stored, 1u);
  EXPECT_EQ(second.deduplicated, 1u);
  EXPECT_EQ(Snap(0).pages, 1u);
  Open(4);
  std::vector<uint8_t> got;
  ASSERT_TRUE(Get("a", 3, &got).ok());
  EXPECT_EQ(got, Bytes(kPage, 3));
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// The evictor thread cleans on its own: with RAM above its watermarks, the
// coldest clean_fraction of it gets an NVMe copy, so a promotion finds room
// without writing.
TEST_F(StoreInvariantsTest, EvictorThreadKeepsColdPagesClean) {
  TierManagerConfig config;  // the daemon's defaults, evictor thread included
  config.index_shards = 4;
  Open(/*host_pages=*/16, {"a"}, config);
  PutChain("a", 0, 40);
  bool clean = false;
  for (int i = 0; i < 500 && !clean; ++i) {
    clean = Snap(0).clean_pages >= 1;
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(clean) << "host pages " << Snap(0).pages << ", cleaned " << Snap(0).cleaned;
  std::vector<PromoteResult> r = mgr_->PromoteBatch(ns_["a"], {Key(0)}, 0);
  EXPECT_EQ(r[0].outcome, PromoteOutcome::kPromoted);
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// When NVMe needs room: by default its NVMe-only pages go first (LRU) and
// copies of RAM pages only when nothing else is left; with
// reclaim_copies_first the copies go first. Either way the pages stay
// readable from RAM and the NVMe-only pages' bytes are untouched.
TEST_F(StoreInvariantsTest, NvmeRoomComesFromNvmeOnlyPagesThenFromCopies) {
  for (bool copies_first : {false, true}) {
    SCOPED_TRACE(copies_first ? "copies first" : "lru");
    TierManagerConfig config = NoThreadConfig();
    config.reclaim_copies_first = copies_first;
    TearDown();
    SetUp();
    Open(/*host_pages=*/8, {"a"}, config);
    PutChain("a", 0, 8);
    ASSERT_EQ(*mgr_->FlushToPersistent(), 8u);
    std::vector<PageKey> keys;
    for (uint64_t i = 0; i < 4; ++i) keys.push_back(Key(i));
    for (PromoteResult& r : mgr_->PromoteBatch(ns_["a"], keys, 0))  // 4 in RAM, copies kept
      ASSERT_EQ(r.outcome, PromoteOutcome::kPromoted);
    ASSERT_EQ(Snap(0).clean_pages, 4u);
    const uint64_t used = Snap(1).used_bytes;
    mgr_->EvictTo(1, used - 2 * kPage);  // room for two pages
    if (copies_first) {
      EXPECT_EQ(Snap(0).clean_pages, 2u);  // two copies forgotten
      EXPECT_EQ(Snap(1).pages, 4u);        // no NVMe-only page lost
    } else {
      EXPECT_EQ(Snap(0).clean_pages, 4u);  // copies kept
      EXPECT_EQ(Snap(1).pages, 2u);        // the two LRU NVMe-only pages went
    }
    mgr_->EvictTo(1, 0);  // everything: copies go last
    EXPECT_EQ(Snap(0).clean_pages, 0u);
    std::vector<uint8_t> got;
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(Get("a", i, &got).ok()) << i;
      EXPECT_EQ(got, Bytes(kPage, i));
    }
  }
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// A PUT deduplicated against another PUT of the key still in flight learns
// that PUT's fate through its continuation: stored once it is published
// (durable, under write-through), or not when it gives the key up, so its
// own reply never promises a page that was not stored. Nothing waits: the
// continuation runs on the thread that resolves the key, once.
TEST_F(StoreInvariantsTest, DedupAgainstAPutInFlightResolvesWithIt) {
  write_through_ = true;
  Open(/*host_pages=*/8);
  auto first = mgr_->Reserve(ns_["a"], Key(1), PageKey::Zero(), kPage);
  auto second = mgr_->Reserve(ns_["a"], Key(1), PageKey::Zero(), kPage);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(second->outcome, PutOutcome::kDeduplicated);
  ASSERT_NE(second->in_flight, nullptr);
  int calls = 0;
  bool stored = false;
  std::thread::id where;
  second->in_flight->OnResolved([&](bool s) {
    ++calls;
    stored = s;
    where = std::this_thread::get_id();
  });
  EXPECT_EQ(calls, 0);  // not yet
  std::thread committer([&] {
    ASSERT_TRUE(first->reservation.Fill(Bytes(kPage, 1).data()).ok());
    ASSERT_TRUE(first->reservation.Commit());
  });
  const std::thread::id committer_id = committer.get_id();
  committer.join();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(stored);
  EXPECT_EQ(where, committer_id);  // on the resolving thread
  // A continuation left after the fact runs at once, here.
  int late = 0;
  second->in_flight->OnResolved([&](bool s) { late += s ? 1 : 100; });
  EXPECT_EQ(late, 1);
  // A dedup against a present page carries no handle: the page is there.
  auto third = mgr_->Reserve(ns_["a"], Key(1), PageKey::Zero(), kPage);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->in_flight, nullptr);
  // The first PUT gives its key up (a failed copy): the dedup learns it.
  auto a = mgr_->Reserve(ns_["a"], Key(2), PageKey::Zero(), kPage);
  auto b = mgr_->Reserve(ns_["a"], Key(2), PageKey::Zero(), kPage);
  ASSERT_TRUE(a.ok() && b.ok() && b->in_flight != nullptr);
  std::optional<bool> given_up;
  b->in_flight->OnResolved([&](bool s) { given_up = s; });
  a->reservation = Reservation();
  ASSERT_TRUE(given_up.has_value());
  EXPECT_FALSE(*given_up);
}

}  // namespace
}  // namespace kvtier::tiers
