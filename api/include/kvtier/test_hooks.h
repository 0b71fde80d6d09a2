// Named test hooks (RocksDB test_util/sync_point.h, CacheLib inject_pause.h):
// kill points, which crash the process at a named place so a crash test can
// stop it between "data written" and "index written", and sync points, which
// let an in-process test run code (or wait for another thread) there.
//
// Both compile only when the build defines KVTIER_TEST_HOOKS (the CMake
// option of the same name: OFF by default, ON in the test command's build,
// scripts/test.sh). Without it the macros expand to nothing, a hook costs
// nothing and the process ignores KVTIER_KILL_POINT (tests/hooks/ checks
// both ways). Built in but unarmed, a hook costs one relaxed atomic load.
// Tests that drive sync points GTEST_SKIP when kEnabled is false.
//
//   KVTIER_KILL_POINT("nvme.persist.after_data");
//   KVTIER_SYNC_POINT("demote.after_persist");
//
// Kill points are armed from the environment, read once at the first kill
// point a process reaches:
//   KVTIER_KILL_POINT=name[:probability][,name[:probability]...]
//   KVTIER_KILL_SEED=N   (optional; default: time and pid)
// A reached, armed point writes one line to stderr ("kvtier: kill point NAME
// reached, SIGKILL") and SIGKILLs the whole process with that probability
// (default 1). The name "*" arms every kill point.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvtier::test_hooks {

#if defined(KVTIER_TEST_HOOKS) && KVTIER_TEST_HOOKS
inline constexpr bool kEnabled = true;
#else
inline constexpr bool kEnabled = false;
#endif

// ---- Kill points -----------------------------------------------------------

namespace internal {
// 0: the environment has not been read yet; 1: nothing armed; 2: armed.
extern std::atomic<int> g_kill_state;
// SyncPoints processing on/off; read by every sync point.
extern std::atomic<bool> g_sync_enabled;
void KillPointSlow(const char* name);
}  // namespace internal

// Replaces the armed kill points with `spec` (the KVTIER_KILL_POINT syntax;
// empty disarms all) and reseeds the random source. InvalidArgument on a
// malformed spec, which leaves nothing armed. For tests that arm points
// themselves (e.g. in a death-test child); thread-safe.
absl::Status ArmKillPoints(absl::string_view spec, uint64_t seed);

// How many times a kill point was reached since the spec was loaded, armed or
// not, while any point was armed (an unarmed process does not count).
uint64_t KillPointHits(absl::string_view name);

// ---- Sync points -----------------------------------------------------------

// A process-wide registry of callbacks keyed by sync point name. Disabled
// (every sync point a no-op after one relaxed load) until EnableProcessing().
// All methods are thread-safe. Callbacks run on the thread that reached the
// point, with no registry lock held; they may block (e.g. wait for another
// point), which stalls that thread only.
class SyncPoints {
 public:
  using Callback = std::function<void(void* arg)>;

  static SyncPoints& Get();

  // `fn` runs each time `name` is reached (replacing any earlier callback).
  void SetCallback(const std::string& name, Callback fn);
  void ClearCallback(const std::string& name);
  void ClearAll();  // callbacks, dependencies and hit counts

  // Each pair {a, b}: a thread reaching b waits until a has been reached at
  // least once (RocksDB LoadDependency). Replaces earlier dependencies.
  void LoadDependencies(const std::vector<std::pair<std::string, std::string>>& deps);

  void EnableProcessing();
  void DisableProcessing();  // wakes every waiter

  // Times `name` was reached while processing was enabled.
  uint64_t Hits(const std::string& name) const;

  // Called by KVTIER_SYNC_POINT; not for direct use.
  void Process(const char* name, void* arg);

 private:
  SyncPoints() = default;
  struct State;
  State& state() const;
};

}  // namespace kvtier::test_hooks

#if defined(KVTIER_TEST_HOOKS) && KVTIER_TEST_HOOKS

#define KVTIER_KILL_POINT(name)                                                          \
  do {                                                                                   \
    if (::kvtier::test_hooks::internal::g_kill_state.load(std::memory_order_relaxed) != 1) \
      ::kvtier::test_hooks::internal::KillPointSlow(name);                               \
  } while (0)

#define KVTIER_SYNC_POINT_CALLBACK(name, arg)                            \
  do {                                                                   \
    if (::kvtier::test_hooks::internal::g_sync_enabled.load(std::memory_order_relaxed)) \
      ::kvtier::test_hooks::SyncPoints::Get().Process((name), (arg));    \
  } while (0)

#else

#define KVTIER_KILL_POINT(name) \
  do {                          \
  } while (0)
#define KVTIER_SYNC_POINT_CALLBACK(name, arg) \
  do {                                        \
  } while (0)

#endif

#define KVTIER_SYNC_POINT(name) KVTIER_SYNC_POINT_CALLBACK(name, nullptr)
