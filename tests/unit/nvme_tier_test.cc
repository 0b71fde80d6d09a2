// The NVMe tier under the TierManager: demotion host -> NVMe, GET from NVMe
// with promotion, restart recovery from RocksDB, and what happens to corrupt
// pages, corrupt index records, a truncated data file and unknown tenants.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "tests/unit/nvme_test_fixture.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::tiers {
namespace {

TEST_F(NvmeTierTest, EvictionDemotesToNvmeAndGetPromotesBack) {
  Open(/*host_pages=*/16);
  PutChain("a", 0, 16);  // fills RAM
  std::vector<PageKey> chain;
  for (uint64_t i = 0; i < 16; ++i) chain.push_back(Key(i));
  mgr_->Lookup(ns_["a"], chain);  // touched tail-first: page 0 is the newest
  // What the evictor thread does above the high watermark.
  EXPECT_EQ(mgr_->EvictTo(0, 8 * kPage), 8u);
  EXPECT_EQ(Snap(0).demotions, 8u);
  EXPECT_EQ(Snap(1).pages, 8u);
  LookupResult where = mgr_->Lookup(ns_["a"], chain);
  ASSERT_EQ(where.hits, 16u);
  EXPECT_EQ(where.tiers[0], TierKind::kHost);    // the prefix stays in RAM
  EXPECT_EQ(where.tiers[15], TierKind::kNvme);   // the suffix went down
  // With RAM full, PUTs land on NVMe directly (no disk I/O on the PUT path).
  PutChain("a", 16, 48);
  EXPECT_EQ(Snap(0).pages + Snap(1).pages, 64u);  // nothing dropped
  // RAM is full of dirty pages: a promotion would have to write one back, so
  // a GET reads NVMe pages without promoting until the cleaner has run.
  std::vector<uint8_t> got;
  ASSERT_EQ(*Get("a", 15, &got), TierKind::kNvme);
  EXPECT_EQ(got, Bytes(kPage, 15));
  EXPECT_EQ(Snap(0).promotions, 0u);
  EXPECT_GT(mgr_->Clean(0), 0u);  // what the evictor thread does ahead of need
  auto served = Get("a", 15, &got);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(*served, TierKind::kNvme);
  EXPECT_EQ(got, Bytes(kPage, 15));
  EXPECT_EQ(Snap(0).promotions, 1u);
  // Now in host.
  auto again = Get("a", 15, &got);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, TierKind::kHost);
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(Get("a", i, &got).ok()) << i;
    ASSERT_EQ(got, Bytes(kPage, i)) << i;
  }
}

TEST_F(NvmeTierTest, RestartServesPagesThatReachedNvme) {
  Open(8);
  PutChain("a", 0, 40);
  const uint64_t on_nvme = Snap(1).pages;
  ASSERT_GT(on_nvme, 0u);
  Open(8);  // "restart": host contents are gone, NVMe pages come back
  EXPECT_EQ(Snap(1).pages, on_nvme);
  EXPECT_EQ(Snap(1).durable.recovered_pages, on_nvme);
  uint64_t found = 0;
  std::vector<uint8_t> got;
  for (uint64_t i = 0; i < 40; ++i) {
    auto served = Get("a", i, &got);
    if (!served.ok()) continue;
    ++found;
    EXPECT_EQ(got, Bytes(kPage, i)) << i;
  }
  EXPECT_EQ(found, on_nvme);
}

TEST_F(NvmeTierTest, WriteThroughPutsSurviveARestartAndDemoteForFree) {
  write_through_ = true;
  Open(16);
  PutChain("a", 0, 8);  // all in RAM, each with a durable copy on NVMe
  EXPECT_EQ(Snap(0).pages, 8u);
  EXPECT_EQ(Snap(1).pages, 0u);
  const uint64_t written = Snap(1).io.bytes_written;
  EXPECT_EQ(written, 8 * kPage);
  EXPECT_EQ(mgr_->EvictTo(0, 0), 8u);  // demotion reuses the copies...
  EXPECT_EQ(Snap(1).pages, 8u);
  EXPECT_EQ(Snap(1).io.bytes_written, written);  // ...without writing again
  std::vector<uint8_t> got;
  ASSERT_TRUE(Get("a", 3, &got).ok());  // promoted; its copy stays on NVMe
  EXPECT_EQ(got, Bytes(kPage, 3));
  PutChain("a", 100, 4);
  Open(16);  // a crash loses RAM; every acknowledged PUT is still there
  EXPECT_EQ(Snap(1).pages, 12u);
  for (uint64_t i : {0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102, 103}) {
    ASSERT_TRUE(Get("a", i, &got).ok()) << i;
    EXPECT_EQ(got, Bytes(kPage, i)) << i;
  }
  for (uint64_t i : {0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102, 103}) mgr_->Delete(ns_["a"], Key(i));
  Open(16);
  EXPECT_EQ(Snap(1).pages, 0u);  // DELETE removed the durable copies too
}

TEST_F(NvmeTierTest, CorruptPageOnDiskIsAMissNotWrongBytes) {
  Open(4);
  PutChain("a", 0, 12);
  ASSERT_GT(Snap(1).pages, 0u);
  mgr_.reset();
  // Scribble over the whole data file.
  int fd = open((dir_ / "kvtier-nvme.data").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> junk(16 * kSlab, 0xAB);
  ASSERT_EQ(pwrite(fd, junk.data(), junk.size(), 0), ssize_t(junk.size()));
  close(fd);
  Open(4);
  ASSERT_GT(Snap(1).pages, 0u);
  std::vector<uint8_t> got;
  for (uint64_t i = 0; i < 12; ++i) {
    auto served = Get("a", i, &got);
    EXPECT_FALSE(served.ok()) << "page " << i << " came back from corrupt bytes";
  }
  EXPECT_GT(Snap(1).checksum_errors, 0u);
  EXPECT_EQ(Snap(1).pages, 0u);  // corrupt pages were dropped
}

TEST_F(NvmeTierTest, TruncatedDataFileDropsRecordsPastTheEnd) {
  Open(4);
  PutChain("a", 0, 40);
  const uint64_t on_nvme = Snap(1).pages;
  ASSERT_GT(on_nvme, 4u);
  mgr_.reset();
  ASSERT_EQ(truncate((dir_ / "kvtier-nvme.data").c_str(), kSlab), 0);  // keep one slab
  Open(4);
  EXPECT_LT(Snap(1).pages, on_nvme);
  EXPECT_GT(Snap(1).durable.dropped_records, 0u);
  std::vector<uint8_t> got;
  for (uint64_t i = 0; i < 40; ++i) {
    if (Get("a", i, &got).ok()) {
      EXPECT_EQ(got, Bytes(kPage, i));
    }
  }
}

TEST_F(NvmeTierTest, CorruptIndexRecordIsDropped) {
  Open(4);
  PutChain("a", 0, 12);
  const uint64_t on_nvme = Snap(1).pages;
  mgr_.reset();
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), (dir_ / "index").string(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), nvme::NvmeIndex::EncodeKey("a", Key(999)),
                        "garbage").ok());
    delete db;
  }
  Open(4);
  EXPECT_EQ(Snap(1).pages, on_nvme);
  EXPECT_EQ(Snap(1).durable.dropped_records, 1u);
}

TEST_F(NvmeTierTest, PagesOfARemovedTenantAreDeletedAtStart) {
  Open(4, {"a", "b"});
  PutChain("b", 100, 12);
  ASSERT_GT(Snap(1).pages, 0u);
  Open(4, {"a"});
  EXPECT_EQ(Snap(1).pages, 0u);
  EXPECT_GT(Snap(1).durable.dropped_records, 0u);
  // Isolation across restarts: tenant "a" cannot see b's keys.
  std::vector<uint8_t> got;
  EXPECT_FALSE(Get("a", 100, &got).ok());
}

TEST_F(NvmeTierTest, TenantsStayIsolatedAcrossRestart) {
  Open(2, {"a", "b"});
  PutChain("a", 0, 10);
  Open(2, {"b", "a"});  // ids change with the order; names do not
  std::vector<uint8_t> got;
  EXPECT_FALSE(Get("b", 0, &got).ok());
  uint64_t found = 0;
  for (uint64_t i = 0; i < 10; ++i) found += Get("a", i, &got).ok();
  EXPECT_GT(found, 0u);
}

TEST_F(NvmeTierTest, DeleteRemovesTheRecord) {
  Open(2);
  PutChain("a", 0, 10);
  for (uint64_t i = 0; i < 10; ++i) mgr_->Delete(ns_["a"], Key(i));
  Open(2);
  EXPECT_EQ(Snap(1).pages, 0u);
}

TEST_F(NvmeTierTest, TmpfsIsRefusedWithAClearError) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  NvmeTierConfig c = NvmeConfig();
  c.dir = "/dev/shm/kvtier-nvme-test-" + std::to_string(getpid());
  auto t = CreateNvmeTier(c);
  std::filesystem::remove_all(c.dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("real disk"), std::string::npos) << t.status();
}

TEST_F(NvmeTierTest, UnwritableDirectoryIsAClearError) {
  if (geteuid() == 0) GTEST_SKIP() << "root can write anywhere";
  NvmeTierConfig c = NvmeConfig();
  c.dir = "/proc/kvtier-nvme";
  auto t = CreateNvmeTier(c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/proc/kvtier-nvme"), std::string::npos);
}


// ---- Fault injection: the NVMe tier over a device that fails on purpose ----
//
// Pages are PUT into the host tier and pushed down with EvictTo(0, 0), so
// every device write is one page's demotion. Whatever the device does, a GET
// returns the page's own bytes or a miss, and the store keeps working.

TEST_F(NvmeFaultTest, WriteEioDuringDemotionDropsThePage) {
  OpenFaulty(16);
  PutChain("a", 0, 8);
  faults_->Set({.fail_write_n = 3, .write_fault = nvme::FaultKind::kEio});
  mgr_->EvictTo(0, 0);
  EXPECT_EQ(faults_->faults_injected(), 1u);
  EXPECT_EQ(Snap(0).pages, 0u);
  EXPECT_EQ(Snap(1).pages, 7u);  // the page whose write failed left the store
  EXPECT_EQ(Snap(0).dropped, 1u);
  EXPECT_EQ(Snap(0).demotions, 7u);
  EXPECT_GE(Snap(1).io.io_errors, 1u);
  EXPECT_EQ(CountGood(0, 8), 7u);
  // The store keeps working, NVMe included.
  PutChain("a", 100, 8);
  mgr_->EvictTo(0, 0);
  EXPECT_EQ(CountGood(100, 8), 8u);
}

TEST_F(NvmeFaultTest, EnospcDuringDemotionDropsPagesAndTheStoreKeepsWorking) {
  OpenFaulty(16);
  PutChain("a", 0, 8);
  // The disk fills up at the 5th write and stays full.
  faults_->Set({.fail_write_n = 5, .write_fault = nvme::FaultKind::kEnospc, .sticky = true});
  mgr_->EvictTo(0, 0);
  EXPECT_EQ(Snap(1).pages, 4u);
  EXPECT_EQ(Snap(0).dropped, 4u);
  EXPECT_EQ(CountGood(0, 8), 4u);
  // RAM still takes and serves pages while the disk is full...
  PutChain("a", 100, 8);
  EXPECT_EQ(CountGood(100, 8), 8u);
  // ...and demotion resumes once there is room again.
  faults_->Set({});
  mgr_->EvictTo(0, 0);
  EXPECT_GT(Snap(0).demotions, 4u);
  EXPECT_EQ(CountGood(100, 8), 8u);
}

TEST_F(NvmeFaultTest, SilentTornWriteIsCaughtByTheChecksum) {
  OpenFaulty(16);
  PutChain("a", 0, 4);
  faults_->Set({.fail_write_n = 2, .write_fault = nvme::FaultKind::kTornWrite,
                .torn_write_reports_ok = true});
  mgr_->EvictTo(0, 0);
  ASSERT_EQ(Snap(1).pages, 4u);  // the device said OK: four pages "on NVMe"
  EXPECT_EQ(CountGood(0, 4), 3u);
  EXPECT_EQ(Snap(1).checksum_errors, 1u);  // counted once, not again by CopyTo
  EXPECT_EQ(Snap(1).pages + Snap(0).pages, 3u);  // the torn page was dropped
}

TEST_F(NvmeFaultTest, SilentTornWriteIsCaughtAfterRestart) {
  auto dev = FileDevice();
  if (!dev.ok() && absl::IsFailedPrecondition(dev.status())) GTEST_SKIP() << dev.status();
  ASSERT_TRUE(dev.ok()) << dev.status();
  OpenFaulty(16, *std::move(dev));
  PutChain("a", 0, 4);
  faults_->Set({.fail_write_n = 3, .write_fault = nvme::FaultKind::kTornWrite,
                .torn_write_reports_ok = true});
  mgr_->EvictTo(0, 0);
  ASSERT_EQ(Snap(1).pages, 4u);
  Open(16);  // restart over the same data file and index, no faults
  ASSERT_EQ(Snap(1).durable.recovered_pages, 4u);
  EXPECT_EQ(CountGood(0, 4), 3u);
  EXPECT_GE(Snap(1).checksum_errors, 1u);
  mgr_->EvictTo(0, 0);  // GETs promoted the good pages: back to NVMe
  Open(16);  // the torn page's record went with it
  EXPECT_EQ(Snap(1).durable.recovered_pages, 3u);
  EXPECT_EQ(CountGood(0, 4), 3u);
}

TEST_F(NvmeFaultTest, ShortReadIsAMissNotWrongBytes) {
  OpenFaulty(16);
  PutChain("a", 0, 4);
  mgr_->EvictTo(0, 0);
  ASSERT_EQ(Snap(1).pages, 4u);
  faults_->Set({.fail_read_n = 1, .read_fault = nvme::FaultKind::kShortIo, .sticky = true});
  EXPECT_EQ(CountGood(0, 4), 0u);  // half a page is never served
  EXPECT_GT(faults_->faults_injected(), 0u);
  EXPECT_GT(Snap(1).io.io_errors, 0u);
  faults_->Set({});
  CountGood(0, 4);  // whatever is still there is right
  PutChain("a", 100, 4);
  EXPECT_EQ(CountGood(100, 4), 4u);
}

TEST_F(NvmeFaultTest, OneShortReadNeverYieldsWrongBytes) {
  OpenFaulty(16);
  PutChain("a", 0, 4);
  mgr_->EvictTo(0, 0);
  for (uint64_t n = 1; n <= 3; ++n) {
    faults_->Set({.fail_read_n = n, .read_fault = nvme::FaultKind::kShortIo});
    CountGood(0, 4);  // a miss or the right bytes, at any point of the GET path
  }
}

TEST_F(NvmeFaultTest, ReadEioIsAMiss) {
  OpenFaulty(16);
  PutChain("a", 0, 4);
  mgr_->EvictTo(0, 0);
  ASSERT_EQ(Snap(1).pages, 4u);
  faults_->Set({.fail_read_n = 1, .read_fault = nvme::FaultKind::kEio, .sticky = true});
  EXPECT_EQ(CountGood(0, 4), 0u);
  EXPECT_GT(Snap(1).io.io_errors, 0u);
  EXPECT_EQ(Snap(1).checksum_errors, 0u);  // an I/O error is not corruption
  faults_->Set({});
  CountGood(0, 4);
  PutChain("a", 100, 4);
  EXPECT_EQ(CountGood(100, 4), 4u);
}

}  // namespace
}  // namespace kvtier::tiers
