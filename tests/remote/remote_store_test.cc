// The remote tier under the store: host + NVMe (memory device) + remote on
// the binary's loopback cluster. Pages evicted from NVMe flow into Redis
// (one MultiSet per batch), come back byte-exact through GET's read path,
// follow --remote_admission, and a corrupt remote value is a miss.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/remote/remote_test_env.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/nvme/device.h"
#include "tiers/nvme/nvme_tier.h"
#include "tiers/remote/remote_record.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier::tiers {
namespace {

using testing::AddNs;
using testing::Bytes;
using testing::Key;
using testing::Put;

constexpr uint64_t kPage = 64 << 10;
constexpr size_t kHost = 0, kNvme = 1, kRemote = 2;

class RemoteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!remote::testing::RedisInstalled()) GTEST_SKIP() << "redis-server not installed";
    ASSERT_NE(remote::testing::SharedCluster(), nullptr);
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-remote-store-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    mgr_.reset();
    std::filesystem::remove_all(dir_);
  }
  // 8 host pages over 32 NVMe pages (index under `dir`) over the remote tier.
  static std::unique_ptr<TierManager> MakeStore(const std::string& dir, TierManagerConfig config) {
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(testing::HostTier(8 * kPage, kPage));
    NvmeTierConfig nc;
    nc.dir = dir;
    nc.capacity_bytes = 2 << 20;
    nc.slab_bytes = 1 << 20;
    auto nvme = CreateNvmeTier(nc, nvme::CreateMemoryDevice(nc.capacity_bytes));
    EXPECT_TRUE(nvme.ok()) << nvme.status();
    if (!nvme.ok()) return nullptr;
    tiers.push_back(*std::move(nvme));
    remote::RemoteTierConfig rc;
    rc.cluster = remote::testing::SharedCluster()->Config();
    rc.capacity_bytes = 1024 * kPage;
    auto remote = remote::CreateRemoteTier(rc);
    EXPECT_TRUE(remote.ok()) << remote.status();
    if (!remote.ok()) return nullptr;
    tiers.push_back(*std::move(remote));
    auto m = TierManager::Create(config, std::move(tiers));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }
  void Open(TierManagerConfig config = testing::NoThreadConfig()) {
    mgr_ = MakeStore(dir_.string(), config);
    ASSERT_NE(mgr_, nullptr);
    ns_ = AddNs(*mgr_, ns_name_);
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  }
  void PutPages(uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; ++i)
      ASSERT_TRUE(Put(*mgr_, ns_, Key(i), PageKey::Zero(), Bytes(kPage, i)).ok()) << i;
  }
  // Everything down to the remote tier: host to NVMe, NVMe to remote.
  void DrainToRemote() {
    mgr_->EvictTo(kHost, 0);
    mgr_->EvictTo(kNvme, 0);
  }
  // GET as a copy worker does it; the served tier in *tier.
  absl::StatusOr<std::vector<uint8_t>> Get(uint64_t i, TierKind* tier = nullptr) {
    std::optional<PagePin> pin = mgr_->PinForRead(ns_, Key(i));
    if (!pin) return absl::NotFoundError("miss");
    if (tier != nullptr) *tier = pin->tier();
    std::vector<uint8_t> bounce;
    absl::StatusOr<const uint8_t*> p = mgr_->ReadPage(*pin, bounce, ReadOptions{});
    if (!p.ok()) return p.status();
    return std::vector<uint8_t>(*p, *p + kPage);
  }
  std::filesystem::path dir_;
  std::string ns_name_ = "store-" + std::to_string(getpid());
  std::unique_ptr<TierManager> mgr_;
  NamespaceId ns_ = 0;
};

TEST_F(RemoteStoreTest, EvictedPagesFlowToRedisAndReadBackByteExact) {
  Open();
  PutPages(0, 24);
  DrainToRemote();
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].pages, 24u);
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].kind, TierKind::kRemote);
  for (uint64_t i = 0; i < 24; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), static_cast<int>(kRemote));
  for (uint64_t i = 0; i < 24; ++i) {
    TierKind served;
    auto got = Get(i, &served);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(served, TierKind::kRemote);
    EXPECT_EQ(*got, Bytes(kPage, i)) << i;
  }
  const TierSnapshot remote = mgr_->Snapshot().tiers[kRemote];
  EXPECT_EQ(remote.checksum_errors, 0u);
  EXPECT_EQ(remote.io.corrupt_reads, 0u);
  EXPECT_GT(mgr_->Snapshot().tiers[kHost].promotions, 0u);  // GET promoted what fit
  // The NVMe tier kept no stale copies of what left it.
  EXPECT_EQ(mgr_->Snapshot().tiers[kNvme].pages, 0u);
}

TEST_F(RemoteStoreTest, ReusedOnlyAdmissionKeepsReusedPages) {
  TierManagerConfig config = testing::NoThreadConfig();
  config.remote_admission = TierManagerConfig::Admission::kReusedOnly;
  Open(config);
  PutPages(100, 10);
  for (uint64_t i = 100; i < 105; ++i) ASSERT_TRUE(Get(i).ok());  // reused
  DrainToRemote();
  for (uint64_t i = 100; i < 105; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), static_cast<int>(kRemote));
  for (uint64_t i = 105; i < 110; ++i) EXPECT_EQ(mgr_->Locate(ns_, Key(i)), -1) << i;
  EXPECT_EQ(mgr_->Snapshot().tiers[kNvme].admission_drops, 5u);
}

TEST_F(RemoteStoreTest, CorruptRemoteValueIsAMissNeverWrongBytes) {
  Open();
  PutPages(200, 4);
  DrainToRemote();
  auto raw = remote::RedisCluster::Create(remote::testing::SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  const std::string key = remote::RecordKey(ns_name_, Key(201));
  auto value = (*raw)->MultiGet(absl::MakeConstSpan(&key, 1));
  ASSERT_TRUE(value[0].ok() && value[0]->has_value());
  std::string bad = **value[0];
  bad.back() ^= 0x40;
  remote::KeyValue kv{key, bad};
  ASSERT_TRUE((*raw)->MultiSet(absl::MakeConstSpan(&kv, 1))[0].ok());
  auto got = Get(201);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_GE(mgr_->Snapshot().tiers[kRemote].io.corrupt_reads, 1u);
  for (uint64_t i : {200, 202, 203}) {
    auto ok = Get(i);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(*ok, Bytes(kPage, i));
  }
}

TEST_F(RemoteStoreTest, DeletedPagesLeaveRedis) {
  Open();
  PutPages(300, 2);
  DrainToRemote();
  ASSERT_TRUE(mgr_->Delete(ns_, Key(300)));
  auto raw = remote::RedisCluster::Create(remote::testing::SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  const std::string key = remote::RecordKey(ns_name_, Key(300));
  EXPECT_FALSE(*(*raw)->MultiExists(absl::MakeConstSpan(&key, 1))[0]);
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].pages, 1u);
}

TEST_F(RemoteStoreTest, AnotherStoreAdoptsPagesFoundInTheCluster) {
  Open();
  PutPages(400, 6);
  DrainToRemote();
  std::filesystem::create_directories(dir_ / "b");
  std::unique_ptr<TierManager> b = MakeStore((dir_ / "b").string(), testing::NoThreadConfig());
  ASSERT_NE(b, nullptr);
  const NamespaceId ns_b = AddNs(*b, ns_name_);
  std::vector<PageKey> chain;
  for (uint64_t i = 400; i < 406; ++i) chain.push_back(Key(i));
  chain.push_back(Key(999));  // never stored: the chain ends there
  EXPECT_EQ(b->Lookup(ns_b, chain).hits, 0u);
  EXPECT_EQ(b->AdoptShared(ns_b, chain, PageKey::Zero(), kPage), 6u);
  LookupResult r = b->Lookup(ns_b, chain);
  EXPECT_EQ(r.hits, 6u);
  EXPECT_EQ(r.tiers[0], TierKind::kRemote);
  // Another namespace finds nothing: the namespace is part of the name.
  const NamespaceId other = AddNs(*b, ns_name_ + "-other");
  EXPECT_EQ(b->AdoptShared(other, chain, PageKey::Zero(), kPage), 0u);
  for (uint64_t i = 400; i < 406; ++i) {
    std::optional<PagePin> pin = b->PinForRead(ns_b, Key(i));
    ASSERT_TRUE(pin.has_value());
    std::vector<uint8_t> bounce;
    auto p = b->ReadPage(*pin, bounce, ReadOptions{});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(std::vector<uint8_t>(*p, *p + kPage), Bytes(kPage, i));
  }
  b.reset();  // B's copies go; A's records stay
  for (uint64_t i = 400; i < 406; ++i) {
    auto got = Get(i);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, Bytes(kPage, i));
  }
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// Pipelined reads: a ReadPages of many remote pages (reads queued together,
// fetched by the readers in batches) hands each page over byte-exact, and
// a corrupt record in the middle is a miss for that page alone.
TEST_F(RemoteStoreTest, ReadPagesOfRemotePagesIsByteExactAndACorruptOneMissesAlone) {
  Open();
  PutPages(500, 24);
  DrainToRemote();
  ASSERT_EQ(mgr_->Snapshot().tiers[kRemote].pages, 24u);
  auto raw = remote::RedisCluster::Create(remote::testing::SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  const std::string bad = remote::RecordKey(ns_name_, Key(510));
  const std::string junk(kPage + 200, 'x');
  ASSERT_TRUE((*raw)->MultiSet({remote::KeyValue{bad, junk}})[0].ok());
  std::vector<PagePin> pins;
  for (uint64_t i = 500; i < 524; ++i) pins.push_back(*mgr_->PinForRead(ns_, Key(i)));
  ReadOptions o;
  o.promote = false;
  std::vector<int> seen(24, 0);
  mgr_->ReadPages(absl::MakeSpan(pins), o, [&](size_t i, absl::StatusOr<const uint8_t*> p) {
    ++seen[i];
    if (i == 10) {
      EXPECT_TRUE(absl::IsDataLoss(p.status())) << p.status();
      return;
    }
    ASSERT_TRUE(p.ok()) << i << ": " << p.status();
    EXPECT_EQ(std::vector<uint8_t>(*p, *p + kPage), Bytes(kPage, 500 + i)) << i;
  });
  EXPECT_EQ(seen, std::vector<int>(24, 1));
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].io.corrupt_reads, 1u);
}

// A page promoted out of the remote tier leaves its record for the other
// nodes: B still adopts and reads it after A moved it up.
TEST_F(RemoteStoreTest, PromotionFromRemoteKeepsTheRecordForOtherNodes) {
  Open();
  PutPages(600, 2);
  DrainToRemote();
  TierKind tier = TierKind::kHost;
  auto got = Get(600, &tier);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(tier, TierKind::kRemote);
  ASSERT_EQ(mgr_->Lookup(ns_, {Key(600)}).tiers[0], TierKind::kHost);  // promoted
  std::filesystem::create_directories(dir_ / "b");
  std::unique_ptr<TierManager> b = MakeStore((dir_ / "b").string(), testing::NoThreadConfig());
  ASSERT_NE(b, nullptr);
  const NamespaceId ns_b = AddNs(*b, ns_name_);
  ASSERT_EQ(b->AdoptShared(ns_b, {Key(600)}, PageKey::Zero(), kPage), 1u);
  std::optional<PagePin> pin = b->PinForRead(ns_b, Key(600));
  ASSERT_TRUE(pin.has_value());
  std::vector<uint8_t> bounce;
  auto p = b->ReadPage(*pin, bounce, ReadOptions{});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::vector<uint8_t>(*p, *p + kPage), Bytes(kPage, 600));
}

// Write-through (--remote_admission=put): a PUT's page is in the cluster
// at once (another node adopts it before A evicts anything), and NVMe
// evictions are dropped instead of stored again.
TEST_F(RemoteStoreTest, WriteThroughOnPutPublishesAndEvictionsAreNotStoredAgain) {
  TierManagerConfig config = testing::NoThreadConfig();
  config.remote_admission = TierManagerConfig::Admission::kOnPut;
  Open(config);
  PutPages(700, 4);
  auto raw = remote::RedisCluster::Create(remote::testing::SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  std::vector<std::string> names;
  for (uint64_t i = 700; i < 704; ++i) names.push_back(remote::RecordKey(ns_name_, Key(i)));
  // Published asynchronously: wait for the publisher (bounded).
  for (int tries = 0; tries < 200; ++tries) {
    if (mgr_->Snapshot().tiers[kRemote].io.published == 4) break;
    usleep(10'000);
  }
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].io.published, 4u);
  for (size_t i = 0; i < names.size(); ++i) {
    auto v = (*raw)->MultiGet(absl::MakeConstSpan(&names[i], 1));
    ASSERT_TRUE(v[0].ok() && v[0]->has_value()) << names[i];
    auto rec = remote::ParseExpected(**v[0], ns_name_, Key(700 + i), kPage);
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(std::vector<uint8_t>(rec->body.begin(), rec->body.end()), Bytes(kPage, 700 + i));
  }
  DrainToRemote();
  const TierSnapshot remote_tier = mgr_->Snapshot().tiers[kRemote];
  EXPECT_EQ(remote_tier.pages, 0u);  // nothing stored twice
  EXPECT_GE(mgr_->Snapshot().tiers[kNvme].admission_drops, 4u);
  // A finds them again through the cluster, like any other node.
  EXPECT_EQ(mgr_->AdoptShared(ns_, {Key(700), Key(701)}, PageKey::Zero(), kPage), 2u);
  auto got = Get(701);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Bytes(kPage, 701));
}

// A remote page whose record left the cluster (its LRU, or another node's
// delete) is a miss once, and then gone from the index: LOOKUP stops
// reporting it and the next PUT stores it again instead of deduplicating
// against the dead entry (found by the kvtier-sim study of issue 15).
TEST_F(RemoteStoreTest, ARemotePageWhoseRecordIsGoneLeavesTheIndexAndIsStoredAgain) {
  Open();
  PutPages(800, 1);
  DrainToRemote();
  ASSERT_EQ(mgr_->Lookup(ns_, {Key(800)}).tiers[0], TierKind::kRemote);
  auto raw = remote::RedisCluster::Create(remote::testing::SharedCluster()->Config());
  ASSERT_TRUE(raw.ok());
  const std::string name = remote::RecordKey(ns_name_, Key(800));
  ASSERT_TRUE(*(*raw)->MultiDelete(absl::MakeConstSpan(&name, 1))[0]);
  auto got = Get(800);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_EQ(mgr_->Lookup(ns_, {Key(800)}).hits, 0u);
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].io.missing_reads, 1u);
  ASSERT_TRUE(Put(*mgr_, ns_, Key(800), PageKey::Zero(), Bytes(kPage, 800)).ok());
  TierKind tier = TierKind::kRemote;
  got = Get(800, &tier);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(tier, TierKind::kHost);
  EXPECT_EQ(*got, Bytes(kPage, 800));
}

// A PUT never lands in the shared tier: with RAM and NVMe pinned full, it is
// refused (before, it took a remote slot, and a batch spanning NVMe and
// remote failed its commit: "pages of one commit on two persistent tiers").
TEST_F(RemoteStoreTest, APutNeverLandsInTheRemoteTier) {
  Open();
  std::vector<PagePin> pins;
  for (uint64_t i = 900; i < 940; ++i) {
    ASSERT_TRUE(Put(*mgr_, ns_, Key(i), PageKey::Zero(), Bytes(kPage, i)).ok()) << i;
    std::optional<PagePin> pin = mgr_->PinForRead(ns_, Key(i));
    ASSERT_TRUE(pin.has_value()) << i;
    EXPECT_NE(pin->tier(), TierKind::kRemote) << i;
    pins.push_back(*std::move(pin));
  }
  absl::StatusOr<ReserveResult> r = mgr_->Reserve(ns_, Key(999), PageKey::Zero(), kPage);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(mgr_->Snapshot().tiers[kRemote].pages, 0u);
}

}  // namespace
}  // namespace kvtier::tiers
