// daemon/allocator.h: with kvtierd's heap thresholds, a handshake frame of
// the frame cap that a thread (libzmq's I/O thread) allocates and frees is
// returned to the system at free(), every time; with glibc's defaults the
// second one stays in that thread's arena (the flood test's CI failures).
// A binary of its own: the thresholds are process-wide.
#include "daemon/allocator.h"

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace kvtier::daemon {
namespace {

int64_t RssAnonKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::atoll(line.c_str() + 8);
  return -1;
}

// Three frames of 16 MiB, one after the other, on a thread of their own:
// the most RssAnon (kB) above the start that any free left behind.
int64_t MostKeptAfterFreeKb() {
  const int64_t start = RssAnonKb();
  int64_t most = 0;
  std::thread io([&] {
    const size_t n = (size_t{16} << 20) + 64;  // a frame and its header
    for (int round = 0; round < 3; ++round) {
      auto* p = static_cast<volatile char*>(std::malloc(n));
      ASSERT_NE(p, nullptr);
      for (size_t k = 0; k < n; k += 4096) p[k] = 1;  // received: resident
      std::free(const_cast<char*>(p));
      most = std::max(most, RssAnonKb() - start);
    }
  });
  io.join();
  return most;
}

TEST(Allocator, AFrameOfTheCapIsReturnedAtFreeEveryTime) {
  // For the record: glibc's defaults, in a child process.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::printf("ALLOCATOR glibc_defaults kept_kib=%lld\n",
                static_cast<long long>(MostKeptAfterFreeKb()));
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);

  ASSERT_TRUE(FixAllocatorThresholds());
  const int64_t kept = MostKeptAfterFreeKb();
  std::printf("ALLOCATOR fixed_thresholds kept_kib=%lld\n", static_cast<long long>(kept));
  EXPECT_LE(kept, 1024) << "a freed 16 MiB frame stayed resident";
}

}  // namespace
}  // namespace kvtier::daemon
