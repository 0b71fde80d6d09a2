// Kill points and sync points (api/include/kvtier/test_hooks.h): arming from
// the environment and by call, probabilities, and sync point callbacks and
// ordering dependencies.
#include "kvtier/test_hooks.h"

#include <signal.h>
#include <stdlib.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::test_hooks {
namespace {

class TestHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kEnabled) GTEST_SKIP() << "built with KVTIER_TEST_HOOKS=OFF";
  }
  void TearDown() override {
    (void)ArmKillPoints("", 1);
    SyncPoints::Get().DisableProcessing();
    SyncPoints::Get().ClearAll();
  }
};

TEST_F(TestHooksTest, UnarmedKillPointIsANoOp) {
  ASSERT_TRUE(ArmKillPoints("", 1).ok());
  KVTIER_KILL_POINT("nvme.persist.after_data");
  SUCCEED();
}

TEST_F(TestHooksTest, ArmedKillPointKillsTheProcess) {
  EXPECT_EXIT(
      {
        (void)ArmKillPoints("nvme.persist.after_data", 1);
        KVTIER_KILL_POINT("nvme.write.after_data");  // not armed: passes
        KVTIER_KILL_POINT("nvme.persist.after_data");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kill point nvme.persist.after_data reached");
}

TEST_F(TestHooksTest, StarArmsEveryPoint) {
  EXPECT_EXIT(
      {
        (void)ArmKillPoints("*", 1);
        KVTIER_KILL_POINT("demote.after_persist");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "demote.after_persist");
}

TEST_F(TestHooksTest, ArmedFromTheEnvironment) {
  // A fresh process (re-executed binary) reads the environment at its first
  // kill point.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_EQ(setenv("KVTIER_KILL_POINT", "a.first:0, nvme.persist.after_index:1", 1), 0);
  ASSERT_EQ(setenv("KVTIER_KILL_SEED", "7", 1), 0);
  EXPECT_EXIT(
      {
        for (int i = 0; i < 100; ++i) KVTIER_KILL_POINT("a.first");  // probability 0
        if (KillPointHits("a.first") != 100) std::exit(3);
        KVTIER_KILL_POINT("nvme.persist.after_index");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "nvme.persist.after_index");
  unsetenv("KVTIER_KILL_POINT");
  unsetenv("KVTIER_KILL_SEED");
}

TEST_F(TestHooksTest, ProbabilityIsRoughlyHonoured) {
  // p = 0.5: over 20 fresh children, some die and some do not.
  int died = 0;
  for (int seed = 1; seed <= 20; ++seed) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      (void)ArmKillPoints("coin:0.5", static_cast<uint64_t>(seed));
      KVTIER_KILL_POINT("coin");
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    died += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  EXPECT_GT(died, 0);
  EXPECT_LT(died, 20);
}

TEST_F(TestHooksTest, MalformedSpecArmsNothing) {
  EXPECT_FALSE(ArmKillPoints("x:2", 1).ok());
  EXPECT_FALSE(ArmKillPoints("x:abc", 1).ok());
  EXPECT_FALSE(ArmKillPoints(":0.5", 1).ok());
  KVTIER_KILL_POINT("x");  // disarmed by the failed call
  EXPECT_TRUE(ArmKillPoints("x:0", 1).ok());
  KVTIER_KILL_POINT("x");
  EXPECT_EQ(KillPointHits("x"), 1u);
}

TEST_F(TestHooksTest, SyncPointRunsItsCallbackOnlyWhenEnabled) {
  int calls = 0;
  int value = 41;
  SyncPoints::Get().SetCallback("p", [&](void* arg) {
    ++calls;
    ++*static_cast<int*>(arg);
  });
  KVTIER_SYNC_POINT_CALLBACK("p", &value);  // processing still off
  EXPECT_EQ(calls, 0);
  SyncPoints::Get().EnableProcessing();
  KVTIER_SYNC_POINT_CALLBACK("p", &value);
  KVTIER_SYNC_POINT("q");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(value, 42);
  EXPECT_EQ(SyncPoints::Get().Hits("p"), 1u);
  EXPECT_EQ(SyncPoints::Get().Hits("q"), 1u);
}

TEST_F(TestHooksTest, DependencyForcesAnInterleaving) {
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(what);
  };
  SyncPoints::Get().LoadDependencies({{"writer.done", "reader.start"}});
  SyncPoints::Get().EnableProcessing();
  std::thread reader([&] {
    KVTIER_SYNC_POINT("reader.start");  // waits for writer.done
    note("read");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  note("write");
  KVTIER_SYNC_POINT("writer.done");
  reader.join();
  EXPECT_EQ(order, (std::vector<std::string>{"write", "read"}));
}

TEST_F(TestHooksTest, DisablingReleasesWaiters) {
  SyncPoints::Get().LoadDependencies({{"never", "blocked"}});
  SyncPoints::Get().EnableProcessing();
  std::thread t([] { KVTIER_SYNC_POINT("blocked"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  SyncPoints::Get().DisableProcessing();
  t.join();
}

}  // namespace
}  // namespace kvtier::test_hooks
