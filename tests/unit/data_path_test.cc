// DataPath without a daemon or sockets: PUT from and GET into a mapped shm
// buffer over a real host + NVMe store, as the copy engine runs them (plan,
// parts, finish), including what a PUT reply says when a durable copy fails
// (issue 11: never a dedup) and when the client truncates its buffer, and how
// a PUT deduplicated against another PUT in flight is settled by that PUT's
// completion, never by a worker waiting (issue 27), in any job order.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/copy_engine.h"
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
    return FinishNow(data, *t);
  }
  // FinishPut of a PUT with no dedup against another PUT in flight: settled
  // at once.
  static absl::StatusOr<PutSummary> FinishNow(const DataPath& data,
                                              const std::shared_ptr<PutTransfer>& t) {
    auto done = data.FinishPut(t, [](PutSummary) { ADD_FAILURE() << "settled later"; });
    if (!done) return absl::InternalError("FinishPut deferred a PUT with nothing in flight");
    return *std::move(done);
  }
  // Writes page `id` at buffer slot `slot` and plans a PUT of it there.
  std::shared_ptr<PutTransfer> PlanOne(const DataPath& data, uint64_t id, size_t slot) {
    std::memcpy(shm_->data() + slot * kPage, Bytes(kPage, id).data(), kPage);
    std::vector<PageKey> keys = {Key(id)};
    auto t = data.PlanPut(ns_["a"], keys, PageKey::Zero(), kPage, buf_,
                          PagePlacement(std::vector<uint64_t>{slot * kPage}), {});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  absl::StatusOr<std::string> Get(const std::vector<uint64_t>& ids) {
    std::vector<PageKey> keys;
    for (uint64_t id : ids) keys.push_back(Key(id));
    std::memset(shm_->data(), 0, shm_->size());
    DataPath data(mgr_.get(), nullptr, nullptr);
    std::shared_ptr<GetJob> t = data.PlanGet(ns_["a"], keys, kPage, buf_, Offsets(keys.size()));
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
  absl::StatusOr<PutSummary> done = FinishNow(data, *t);
  EXPECT_EQ(done.status().code(), absl::StatusCode::kFailedPrecondition) << done.status();
  EXPECT_EQ(mgr_->Lookup(ns_["a"], keys).hits, 0u);
  // The keys' claims went with the reservations: a later PUT stores them.
  auto again = mgr_->Reserve(ns_["a"], Key(10), PageKey::Zero(), kPage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, tiers::PutOutcome::kReserved);
}

// Two PUTs of one key: the first claims it, the second is deduplicated
// against it while it is in flight. The second finishes first (a copy engine
// may run jobs in any order): it must not wait, and its reply comes when the
// first commits, saying "deduplicated".
TEST_F(DataPathTest, DedupAgainstAPutInFlightIsSettledByItsCommitNotByAWait) {
  OpenFaulty(4);
  DataPath data(mgr_.get(), nullptr, nullptr);
  std::shared_ptr<PutTransfer> first = PlanOne(data, 5, 0);
  std::shared_ptr<PutTransfer> second = PlanOne(data, 5, 1);
  ASSERT_TRUE(first && second);
  ASSERT_EQ(first->reservations.size(), 1u);
  ASSERT_EQ(second->reservations.size(), 0u);
  ASSERT_EQ(second->in_flight.size(), 1u);
  std::optional<PutSummary> later;
  const absl::Time start = absl::Now();
  auto early = data.FinishPut(second, [&](PutSummary s) { later = std::move(s); });
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "FinishPut waited for the other PUT";
  EXPECT_FALSE(early.has_value()) << "settled before the other PUT resolved";
  EXPECT_FALSE(later.has_value());
  data.FillPut(*first, 0, 1);
  absl::StatusOr<PutSummary> stored = FinishNow(data, first);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->stored, 1u);
  ASSERT_TRUE(later.has_value()) << "the first PUT's commit did not settle the second";
  EXPECT_EQ(later->deduplicated, 1u);
  EXPECT_EQ(later->not_stored, 0u);
  EXPECT_EQ(later->page_status, std::vector<uint8_t>{static_cast<uint8_t>(wire::PUT_PAGE_DEDUPLICATED)});
  EXPECT_EQ(later->leading_kept, 1u);
}

// The same, but the first PUT fails (its buffer is truncated): the second's
// key is not stored, and says why; never a dedup of a page that is not there.
TEST_F(DataPathTest, DedupAgainstAPutThatFailsIsNotStored) {
  OpenFaulty(4);
  DataPath data(mgr_.get(), nullptr, nullptr);
  std::shared_ptr<PutTransfer> first = PlanOne(data, 6, 0);
  std::shared_ptr<PutTransfer> second = PlanOne(data, 6, 1);
  ASSERT_TRUE(first && second);
  std::optional<PutSummary> later;
  EXPECT_FALSE(data.FinishPut(second, [&](PutSummary s) { later = std::move(s); }).has_value());
  first->fault = true;  // as FillPut marks a SIGBUS on the client's buffer
  absl::StatusOr<PutSummary> failed = FinishNow(data, first);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition) << failed.status();
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->deduplicated, 0u);
  EXPECT_EQ(later->not_stored, 1u);
  EXPECT_EQ(later->page_status, std::vector<uint8_t>{static_cast<uint8_t>(wire::PUT_PAGE_OTHER_PUT_FAILED)});
  EXPECT_NE(later->not_stored_reason.find("another PUT"), std::string::npos);
  EXPECT_EQ(mgr_->Lookup(ns_["a"], std::vector<PageKey>{Key(6)}).hits, 0u);
}

// The daemon's shape of it on a real copy engine with one worker that runs
// the newest task first: the dedup PUT's finish runs before the PUT it
// depends on. Waiting there (the old FinishPut) held the only worker for 30
// s and then answered "not stored"; now both replies come at once, right.
TEST_F(DataPathTest, OutOfOrderCopyEngineAnswersBothPutsWithoutWaiting) {
  OpenFaulty(4);
  zmq::context_t ctx(1);
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.bind("inproc://lifo-engine-test");
  auto engine = CopyEngine::Create(ctx, "inproc://lifo-engine-test", 1, CopyEngine::Order::kLifo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  CopyEngine* eng = engine->get();
  DataPath data(mgr_.get(), nullptr, nullptr);
  auto reply = [](std::string name, const absl::StatusOr<PutSummary>& s) {
    std::vector<zmq::message_t> f;
    f.emplace_back(s.ok() ? absl::StrCat(name, " stored=", s->stored, " dedup=", s->deduplicated,
                                         " not_stored=", s->not_stored)
                          : absl::StrCat(name, " ", s.status().ToString()));
    return f;
  };
  auto submit = [&](std::string name, std::shared_ptr<PutTransfer> t) {
    std::vector<CopyEngine::Part> parts;
    if (!t->reservations.empty()) parts.push_back([&data, t] { data.FillPut(*t, 0, 1); });
    eng->Submit(std::move(parts), [&data, eng, reply, name, t] {
      auto later = [eng, reply, name](PutSummary s) {
        eng->Submit({}, [reply, name, s = std::move(s)] { return reply(name, s); });
      };
      auto done = data.FinishPut(t, later);
      return done ? reply(name, *done) : std::vector<zmq::message_t>();
    });
  };
  // A gate holds the only worker until both PUTs are queued.
  absl::Notification queued;
  eng->Submit({[&queued] { queued.WaitForNotification(); }}, [] {
    std::vector<zmq::message_t> f;
    f.emplace_back(std::string("gate"));
    return f;
  });
  submit("first", PlanOne(data, 7, 0));
  submit("second", PlanOne(data, 7, 1));
  const absl::Time start = absl::Now();
  queued.Notify();
  std::set<std::string> replies;
  pull.set(zmq::sockopt::rcvtimeo, 10000);
  for (int i = 0; i < 3; ++i) {
    zmq::message_t m;
    ASSERT_TRUE(pull.recv(m)) << "no reply " << i << " within 10 s";
    replies.insert(m.to_string());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(replies, (std::set<std::string>{"gate", "first stored=1 dedup=0 not_stored=0",
                                            "second stored=0 dedup=1 not_stored=0"}));
  (*engine)->Shutdown();
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
