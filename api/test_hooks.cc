// Kill points (armed from KVTIER_KILL_POINT, read once) and the sync point
// registry. Test machinery: std::mutex (StdMutex, so the lock annotations are
// checked), no attempt at speed beyond the unarmed fast path in the macros.
#include "kvtier/test_hooks.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "kvtier/std_mutex.h"

namespace kvtier::test_hooks {
namespace internal {
std::atomic<int> g_kill_state{0};
std::atomic<bool> g_sync_enabled{false};
}  // namespace internal

namespace {

struct KillPoint {
  double probability = 1.0;
};

struct KillPoints {
  StdMutex mu;
  std::map<std::string, KillPoint, std::less<>> armed ABSL_GUARDED_BY(mu);  // "*": every point
  std::map<std::string, uint64_t, std::less<>> hits ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> rng{0};
};

KillPoints& Kills() {
  static KillPoints* k = new KillPoints();  // never destroyed: used until exit
  return *k;
}

// splitmix64 over an atomic counter: thread-safe, uniform in [0, 1).
double NextUniform(std::atomic<uint64_t>& state) {
  uint64_t z = state.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed) +
               0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

absl::Status ParseSpec(absl::string_view spec, std::map<std::string, KillPoint, std::less<>>* out) {
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits(':', 1));
    KillPoint p;
    if (kv.first.empty())
      return absl::InvalidArgumentError(absl::StrCat("kill point spec '", item, "': no name"));
    if (!kv.second.empty() &&
        (!absl::SimpleAtod(kv.second, &p.probability) || !(p.probability >= 0.0) ||
         p.probability > 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kill point spec '", item, "': probability must be in [0, 1]"));
    }
    (*out)[std::string(kv.first)] = p;
  }
  return absl::OkStatus();
}

uint64_t DefaultSeed() {
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  return t ^ (static_cast<uint64_t>(getpid()) << 32);
}

absl::Status ArmLocked(KillPoints& k, absl::string_view spec, uint64_t seed)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
  std::map<std::string, KillPoint, std::less<>> armed;
  absl::Status st = ParseSpec(spec, &armed);
  if (!st.ok()) armed.clear();
  k.armed = std::move(armed);
  k.hits.clear();
  k.rng.store(seed, std::memory_order_relaxed);
  internal::g_kill_state.store(k.armed.empty() ? 1 : 2, std::memory_order_relaxed);
  return st;
}

void LoadFromEnvLocked(KillPoints& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
  const char* spec = std::getenv("KVTIER_KILL_POINT");
  const char* seed_env = std::getenv("KVTIER_KILL_SEED");
  uint64_t seed = DefaultSeed();
  if (seed_env != nullptr && !absl::SimpleAtoi(seed_env, &seed))
    std::fprintf(stderr, "kvtier: ignoring KVTIER_KILL_SEED=%s (not a number)\n", seed_env);
  absl::Status st = ArmLocked(k, spec ? spec : "", seed);
  if (!st.ok()) std::fprintf(stderr, "kvtier: KVTIER_KILL_POINT ignored: %s\n", st.ToString().c_str());
}

[[noreturn]] void Die(const char* name) {
  // Only async-signal-safe calls from here: other threads keep running.
  const std::string line = absl::StrCat("kvtier: kill point ", name, " reached, SIGKILL\n");
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  kill(getpid(), SIGKILL);
  _exit(137);  // not reached
}

}  // namespace

namespace internal {

void KillPointSlow(const char* name) {
  // Built without hooks (a release build) nothing reaches here through the
  // macros; a stray direct call still never reads the environment.
  if constexpr (!kEnabled) return;
  KillPoints& k = Kills();
  double probability = -1.0;
  {
    StdMutexLock lock(&k.mu);
    if (g_kill_state.load(std::memory_order_relaxed) == 0) LoadFromEnvLocked(k);
    if (g_kill_state.load(std::memory_order_relaxed) != 2) return;
    ++k.hits[name];
    auto it = k.armed.find(absl::string_view(name));
    if (it == k.armed.end()) it = k.armed.find("*");
    if (it == k.armed.end()) return;
    probability = it->second.probability;
  }
  if (probability >= 1.0 || NextUniform(k.rng) < probability) Die(name);
}

}  // namespace internal

absl::Status ArmKillPoints(absl::string_view spec, uint64_t seed) {
  KillPoints& k = Kills();
  StdMutexLock lock(&k.mu);
  return ArmLocked(k, spec, seed);
}

uint64_t KillPointHits(absl::string_view name) {
  KillPoints& k = Kills();
  StdMutexLock lock(&k.mu);
  auto it = k.hits.find(name);
  return it == k.hits.end() ? 0 : it->second;
}

// ---- Sync points -----------------------------------------------------------

struct SyncPoints::State {
  StdMutex mu;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<Callback>, std::less<>> callbacks ABSL_GUARDED_BY(mu);
  std::map<std::string, std::vector<std::string>, std::less<>> predecessors ABSL_GUARDED_BY(mu);
  std::map<std::string, uint64_t, std::less<>> hits ABSL_GUARDED_BY(mu);
};

SyncPoints& SyncPoints::Get() {
  static SyncPoints* s = new SyncPoints();  // never destroyed: threads may outlive main
  return *s;
}

SyncPoints::State& SyncPoints::state() const {
  static State* s = new State();
  return *s;
}

void SyncPoints::SetCallback(const std::string& name, Callback fn) {
  State& s = state();
  StdMutexLock lock(&s.mu);
  s.callbacks[name] = std::make_shared<Callback>(std::move(fn));
}

void SyncPoints::ClearCallback(const std::string& name) {
  State& s = state();
  StdMutexLock lock(&s.mu);
  s.callbacks.erase(name);
}

void SyncPoints::ClearAll() {
  State& s = state();
  StdMutexLock lock(&s.mu);
  s.callbacks.clear();
  s.predecessors.clear();
  s.hits.clear();
  s.cv.notify_all();
}

void SyncPoints::LoadDependencies(const std::vector<std::pair<std::string, std::string>>& deps) {
  State& s = state();
  StdMutexLock lock(&s.mu);
  s.predecessors.clear();
  for (const auto& [before, after] : deps) s.predecessors[after].push_back(before);
  s.cv.notify_all();
}

void SyncPoints::EnableProcessing() { internal::g_sync_enabled.store(true); }

void SyncPoints::DisableProcessing() {
  internal::g_sync_enabled.store(false);
  State& s = state();
  StdMutexLock lock(&s.mu);
  s.cv.notify_all();
}

uint64_t SyncPoints::Hits(const std::string& name) const {
  State& s = state();
  StdMutexLock lock(&s.mu);
  auto it = s.hits.find(name);
  return it == s.hits.end() ? 0 : it->second;
}

void SyncPoints::Process(const char* name, void* arg) {
  State& s = state();
  std::shared_ptr<Callback> cb;
  {
    StdMutexLock lock(&s.mu);
    auto preds = s.predecessors.find(absl::string_view(name));
    if (preds != s.predecessors.end()) {
      const std::vector<std::string> before = preds->second;  // the map may change while we wait
      s.mu.Await(s.cv, [&] {
        s.mu.AssertHeld();
        if (!internal::g_sync_enabled.load()) return true;
        for (const std::string& b : before)
          if (s.hits.find(b) == s.hits.end()) return false;
        return true;
      });
    }
    if (auto it = s.callbacks.find(absl::string_view(name)); it != s.callbacks.end()) cb = it->second;
  }
  if (cb) (*cb)(arg);  // no lock held: a callback may block or reach other points
  // Counted after the callback, so a dependent point runs after it finished.
  StdMutexLock lock(&s.mu);
  ++s.hits[name];
  s.cv.notify_all();
}

}  // namespace kvtier::test_hooks
