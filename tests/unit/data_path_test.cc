// DataPath without a daemon or sockets: PUT from and GET into a mapped shm
// buffer over a real host + NVMe store, as the copy engine runs them (plan,
// parts, finish), including what a PUT reply says when a durable copy fails
// (issue 11: never a dedup) and when the client truncates its buffer.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "daemon/data_path.h"
#include "gtest/gtest.h"
#include "kvtier/shm_buffer.h"
#include "tests/unit/nvme_test_fixture.h"

namespace kvtier::daemon {
namespace {

using tiers::testing::Bytes;
using tiers::testing::Key;
constexpr uint64_t kPage = tiers::kPage;

class DataPathTest : public tiers::NvmeFaultTest {
 protected:
  void SetUp() override {
    tiers::NvmeFaultTest::SetUp();
    InstallSigbusGuard();
    auto shm = ShmBuffer::Create(16 * kPage);
    ASSERT_TRUE(shm.ok()) << shm.status();
    shm_ = *std::move(shm);
    auto buf = ClientBuffer::Map(shm_->name(), shm_->size());
    ASSERT_TRUE(buf.ok()) << buf.status();
    buf_ = *std::move(buf);
  }
  void TearDown() override {
    buf_.reset();
    shm_.reset();
    tiers::NvmeFaultTest::TearDown();
  }

  // Page i of the chain goes at buffer slot i.
  std::vector<uint64_t> Offsets(size_t n) {
    std::vector<uint64_t> o(n);
    for (size_t i = 0; i < n; ++i) o[i] = i * kPage;
    return o;
  }
  absl::StatusOr<PutSummary> Put(const std::vector<uint64_t>& ids) {
    std::vector<PageKey> keys;
    for (size_t i = 0; i < ids.size(); ++i) {
      keys.push_back(Key(ids[i]));
      std::memcpy(shm_->data() + i * kPage, Bytes(kPage, ids[i]).data(), kPage);
    }
    DataPath data(mgr_.get(), nullptr, nullptr);
    auto t = data.PlanPut(ns_["a"], keys, PageKey::Zero(), kPage, buf_, Offsets(keys.size()), {});
    if (!t.ok()) return t.status();
    data.FillPut(**t, 0, (*t)->reservations.size());
    return data.FinishPut(**t);
  }
  absl::StatusOr<std::string> Get(const std::vector<uint64_t>& ids) {
    std::vector<PageKey> keys;
    for (uint64_t id : ids) keys.push_back(Key(id));
    std::memset(shm_->data(), 0, shm_->size());
    DataPath data(mgr_.get(), nullptr, nullptr);
    std::shared_ptr<GetTransfer> t = data.PlanGet(ns_["a"], keys, kPage, buf_, Offsets(keys.size()));
    data.CopyGet(*t, 0, keys.size());
    if (absl::Status st = data.FinishGet(*t); !st.ok()) return st;
    return t->tiers;
  }
  bool Holds(size_t slot, uint64_t id) {
    return std::memcmp(shm_->data() + slot * kPage, Bytes(kPage, id).data(), kPage) == 0;
  }

  std::unique_ptr<ShmBuffer> shm_;
  std::shared_ptr<ClientBuffer> buf_;
};

TEST_F(DataPathTest, PutThenGetFromRamAndFromNvme) {
  OpenFaulty(/*host_pages=*/4);
  absl::StatusOr<PutSummary> put = Put({1, 2, 3, 4, 5, 6});  // two land on NVMe
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, 6u);
  absl::StatusOr<std::string> got = Get({1, 2, 3, 4, 5, 6, 99});
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NE((*got)[i], 0) << i;
    EXPECT_TRUE(Holds(i, i + 1)) << "page " << i;
  }
  EXPECT_EQ((*got)[6], 0);  // a miss
  EXPECT_EQ((*got)[5], static_cast<char>(tiers::TierKind::kNvme));
}

TEST_F(DataPathTest, RepeatedKeyIsOneStoreAndOneDedup) {
  OpenFaulty(4);
  absl::StatusOr<PutSummary> put = Put({7, 7});
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->stored, 1u);
  EXPECT_EQ(put->deduplicated, 1u);
}

// Regression (issue 11, item 2): the daemon used to add CommitAll's
// shortfall to `deduplicated`; three pages whose sync failed came back as
// stored=0 deduplicated=3.
TEST_F(DataPathTest, FailedSyncIsReportedNotStoredWithItsReason) {
  write_through_ = true;
  OpenFaulty(4);
  faults_->Set(tiers::nvme::FaultSpec{.fail_flush_n = 1});
  absl::StatusOr<PutSummary> put = Put({1, 2, 3});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, 0u);
  EXPECT_EQ(put->deduplicated, 0u);
  EXPECT_EQ(put->not_stored, 3u);
  EXPECT_NE(put->not_stored_reason.find("durable"), std::string::npos) << put->not_stored_reason;
  absl::StatusOr<std::string> got = Get({1});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0], 0);
}

TEST_F(DataPathTest, TruncatedBufferFailsThePutAndPublishesNothing) {
  OpenFaulty(4);
  for (size_t i = 0; i < 2; ++i) std::memcpy(shm_->data() + i * kPage, Bytes(kPage, 10 + i).data(), kPage);
  DataPath data(mgr_.get(), nullptr, nullptr);
  std::vector<PageKey> keys = {Key(10), Key(11)};
  auto t = data.PlanPut(ns_["a"], keys, PageKey::Zero(), kPage, buf_, Offsets(2), {});
  ASSERT_TRUE(t.ok());
  int fd = shm_open(shm_->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);
  data.FillPut(**t, 0, 2);
  absl::StatusOr<PutSummary> done = data.FinishPut(**t);
  EXPECT_EQ(done.status().code(), absl::StatusCode::kFailedPrecondition) << done.status();
  EXPECT_EQ(mgr_->Lookup(ns_["a"], keys).hits, 0u);
  // The keys' claims went with the reservations: a later PUT stores them.
  auto again = mgr_->Reserve(ns_["a"], Key(10), PageKey::Zero(), kPage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, tiers::PutOutcome::kReserved);
}

// Generated shm names are "/kvtier-client-<pid>-<n>": an object a killed
// process of the same pid left behind (pids wrap; crash tests SIGKILL
// clients) must not make Create fail, nor be removed (it is not ours).
TEST(ShmBufferNames, CreateSkipsNamesLeftByAnEarlierProcessOfTheSamePid) {
  std::vector<std::string> stale;
  for (int n = 0; n < 200; ++n) {
    std::string name = "/kvtier-client-" + std::to_string(getpid()) + "-" + std::to_string(n);
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) continue;  // this process made it already
    close(fd);
    stale.push_back(name);
  }
  auto buf = ShmBuffer::Create(4096);
  EXPECT_TRUE(buf.ok()) << buf.status();
  for (const std::string& name : stale) {
    int fd = shm_open(name.c_str(), O_RDONLY, 0);  // still there
    EXPECT_GE(fd, 0) << name;
    if (fd >= 0) close(fd);
    shm_unlink(name.c_str());
  }
  // A name the caller chose is taken as it is: one that exists is an error.
  const std::string mine = "/kvtier-test-" + std::to_string(getpid());
  int fd = shm_open(mine.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_FALSE(ShmBuffer::Create(4096, mine).ok());
  shm_unlink(mine.c_str());
}

}  // namespace
}  // namespace kvtier::daemon
