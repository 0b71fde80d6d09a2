// kvtier-crash-driver: the kill -9 loop (RocksDB db_stress style). Starts
// kvtierd over a small host tier so pages demote to NVMe quickly, PUTs chains
// of pages whose bytes are a function of their key from --sessions concurrent
// sessions (with --shared, chains that overlap across sessions: a common
// system prompt, pairwise-shared pages, private tails, and [A, A] PUTs),
// SIGKILLs the daemon at random moments (sometimes from inside, through an
// armed kill point), restarts it and checks after every restart:
//   - the daemon comes back and serves;
//   - every page it reports present reads back byte-exact;
//   - it never reports a page that was never PUT;
//   - a share of acknowledged pages survives (--min_survival; write-through:
//     every one, 1.0; write-back: pages still only in RAM at the kill are
//     legitimately lost, pages on NVMe must not be).
// Exit 0 when every check held; the summary goes to stdout.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "kvtier/test_hooks.h"
#include "tests/crash/crash_daemon.h"
#include "tests/crash/crash_workload.h"

ABSL_FLAG(std::string, kvtierd, KVTIERD_PATH, "kvtierd binary");
ABSL_FLAG(int, kills, 20, "daemon kills (each followed by a restart and a check)");
ABSL_FLAG(int, min_kills, -1, "fewer kills than this (when --max_seconds cut the loop) fail (-1: --kills)");
ABSL_FLAG(uint64_t, seed, 0, "random seed (0: from the clock; printed)");
ABSL_FLAG(std::string, dir, "", "work directory on a real disk (default: a new one under /var/tmp)");
ABSL_FLAG(bool, keep_dir, false, "keep the work directory (it is always kept on failure)");
ABSL_FLAG(int, min_delay_ms, 100, "shortest run before a kill");
ABSL_FLAG(int, max_delay_ms, 1200, "longest run before a kill");
ABSL_FLAG(double, kill_point_share, 0.5, "share of runs with a kill point armed in the daemon");
ABSL_FLAG(int, verify_max, 3000, "pages checked after each restart (a sample beyond this)");
ABSL_FLAG(int, verify_all_every, 0,
          "every this many restarts, and after the last one, read back every page ever "
          "acknowledged instead of a sample (0: never)");
ABSL_FLAG(int, max_live_pages, 0,
          "after a check, DELETE the oldest acknowledged pages when more than this many are "
          "live, so a long loop's store (and its restarts) stay small (0: never)");
ABSL_FLAG(int, chain_pages, 8, "pages per PUT (one prefix chain)");
ABSL_FLAG(int, max_seconds, 0, "stop starting new runs after this long (0: no limit)");
ABSL_FLAG(bool, verbose, false, "one line per run");
ABSL_FLAG(double, min_survival, 0,
          "fail unless this share of pages acknowledged before a kill is present after it "
          "(write-through: 1.0; write-back loses what was only in RAM, so 0)");
ABSL_FLAG(bool, fail_fast, true,
          "stop at the first check that finds fewer than --min_survival of the acknowledged "
          "pages it read (false: run every kill and report the whole loss)");
ABSL_FLAG(int, sessions, 1, "concurrent writer sessions (one client connection and thread each)");
ABSL_FLAG(bool, shared, false,
          "chains overlap across sessions: shared system prompt, pairwise pages, private tail");
ABSL_FLAG(double, repeat_share, 0.05, "with --shared: share of PUTs that repeat one key ([A, A])");
ABSL_FLAG(int, round_ms, 50, "with --shared: how long the sessions' new shared keys stay the same");
ABSL_FLAG(int, tokens_per_page, 256, "page size: 512 bytes per token (256: 128 KiB, 16: 8 KiB)");
ABSL_FLAG(int, put_timeout_ms, 300, "a PUT unanswered this long is unacknowledged");
ABSL_FLAG(std::vector<std::string>, kill_points,
          std::vector<std::string>({"nvme.persist.after_data", "nvme.persist.after_index",
                                    "nvme.write.after_data", "demote.after_persist"}),
          "kill points armed at random (comma-separated)");
ABSL_FLAG(std::vector<std::string>, daemon_flags,
          std::vector<std::string>({"--host_bytes=4MiB", "--host_slab_bytes=1MiB",
                                    "--nvme_bytes=256MiB", "--high_watermark=0.5",
                                    "--low_watermark=0.3", "--copy_threads=1"}),
          "kvtierd flags (comma-separated)");

namespace kvtier::crash {
namespace {

using Clock = std::chrono::steady_clock;

std::string MakeWorkDir() {
  std::string d = absl::GetFlag(FLAGS_dir);
  if (!d.empty()) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }
  char tmpl[] = "/var/tmp/kvtier-crash-XXXXXX";
  const char* p = mkdtemp(tmpl);
  return p ? p : "";
}

// The environment of one run: maybe a kill point, with a probability.
std::map<std::string, std::string> RunEnv(std::mt19937_64& rng, std::string* armed) {
  armed->clear();
  if (std::uniform_real_distribution<double>(0, 1)(rng) >= absl::GetFlag(FLAGS_kill_point_share))
    return {};
  static const double kProbabilities[] = {0.02, 0.1, 0.3};
  const std::vector<std::string> points = absl::GetFlag(FLAGS_kill_points);
  if (points.empty()) return {};
  *armed = absl::StrCat(points[rng() % points.size()], ":", kProbabilities[rng() % 3]);
  return {{"KVTIER_KILL_POINT", *armed}, {"KVTIER_KILL_SEED", std::to_string(rng())}};
}

// Waits until the delay passes or the daemon dies by itself (kill point),
// then makes sure it is dead; tells the writer to stop. Peeks with WNOWAIT so
// the main thread does the reaping.
void Killer(pid_t pid, int delay_ms, std::atomic<bool>* stop, std::atomic<bool>* self_killed) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(delay_ms);
  while (Clock::now() < deadline) {
    siginfo_t si{};
    if (waitid(P_PID, pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
      self_killed->store(true);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!self_killed->load()) kill(pid, SIGKILL);
  stop->store(true);
}

int CountKillPointLines(const std::string& log_path, uint64_t from, std::string* which) {
  std::ifstream in(log_path);
  in.seekg(static_cast<std::streamoff>(from));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.find("kvtier: kill point ") == std::string::npos) continue;
    ++n;
    *which = line.substr(std::strlen("kvtier: kill point "));
    *which = which->substr(0, which->find(' '));
  }
  return n;
}

long long Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

WorkloadOptions Options(uint64_t seed, const std::string& dir) {
  WorkloadOptions o;
  o.seed = seed;
  o.dir = dir;
  o.chain_pages = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_chain_pages)));
  o.verify_max = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_verify_max)));
  o.sessions = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_sessions)));
  o.shared = absl::GetFlag(FLAGS_shared);
  o.repeat_share = absl::GetFlag(FLAGS_repeat_share);
  o.tokens_per_page = static_cast<uint32_t>(std::max(1, absl::GetFlag(FLAGS_tokens_per_page)));
  o.round_ms = absl::GetFlag(FLAGS_round_ms);
  o.put_timeout_ms = absl::GetFlag(FLAGS_put_timeout_ms);
  return o;
}

// Fewer than --min_survival of the acknowledged pages a check read were there.
bool LostTooMany(uint64_t present, uint64_t checked) {
  return checked > 0 && double(present) < absl::GetFlag(FLAGS_min_survival) * double(checked);
}

std::string LossText(const CheckResult& c) {
  return absl::StrCat(c.acked_checked - c.acked_present, " of ", c.acked_checked,
                      " acknowledged pages read were missing (system ",
                      c.missing_by_class[int(KeyClass::kSystem)], ", pair ",
                      c.missing_by_class[int(KeyClass::kPair)], ", private ",
                      c.missing_by_class[int(KeyClass::kPrivate)], ", repeat ",
                      c.missing_by_class[int(KeyClass::kRepeat)], "; e.g. ", c.missing_example,
                      ")");
}

int Main() {
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ getpid();
  std::mt19937_64 rng(seed);
  const std::string dir = MakeWorkDir();
  char sock_tmpl[] = "/tmp/kvtier-crash-sock-XXXXXX";
  const char* sock_dir = mkdtemp(sock_tmpl);
  if (dir.empty() || sock_dir == nullptr) {
    std::fprintf(stderr, "crash-driver: cannot create work directories\n");
    return 2;
  }
  std::printf("crash-driver: seed=%llu dir=%s hooks=%s sessions=%d%s page=%d KiB\n",
              static_cast<unsigned long long>(seed), dir.c_str(),
              test_hooks::kEnabled ? "on" : "off (no kill points in this build)",
              absl::GetFlag(FLAGS_sessions), absl::GetFlag(FLAGS_shared) ? " (shared chains)" : "",
              absl::GetFlag(FLAGS_tokens_per_page) / 2);
  std::fflush(stdout);

  CrashDaemon daemon(DaemonSpec{absl::GetFlag(FLAGS_kvtierd), dir,
                                std::string(sock_dir) + "/kvtierd.sock",
                                absl::GetFlag(FLAGS_daemon_flags)});
  Workload work(Options(seed, dir));
  RunTotals totals;
  std::map<std::string, int> point_kills;
  const auto start = Clock::now();
  const int kills = absl::GetFlag(FLAGS_kills);
  bool ok = true;
  std::string failure, first_loss;
  for (int run = 0; run <= kills && ok; ++run) {
    std::string armed;
    std::map<std::string, std::string> env = RunEnv(rng, &armed);
    if (run == kills) env.clear(), armed.clear();  // the last start only checks
    const uint64_t log_from = FileSize(daemon.log_path());
    const auto t0 = Clock::now();
    // GETs from NVMe promote pages (more churn, more crash windows) in half
    // of the runs; the other half reads NVMe in place, which checks faster.
    const bool promote = rng() % 2 == 0;
    if (absl::Status st = daemon.Start(env, {promote ? "--promote_on_get=true"
                                                     : "--promote_on_get=false"}, 15000);
        !st.ok()) {
      ok = false;
      failure = absl::StrCat("restart ", run, " failed: ", st.ToString());
      break;
    }
    if (run > 0) ++totals.restarts;
    // Kill points may fire during recovery and verification too (GET
    // promotions demote other pages): that is one more crash to survive.
    const auto t1 = Clock::now();
    const int every = absl::GetFlag(FLAGS_verify_all_every);
    const bool all = every > 0 && run > 0 && (run % every == 0 || run == kills);
    CheckResult check = work.Verify(daemon.endpoint(), [&] { return daemon.Alive(); }, all);
    const auto t2 = Clock::now();
    if (absl::GetFlag(FLAGS_verbose)) {
      std::printf("run %d: armed '%s'%s start %lld ms, %s %lld ms%s: %llu/%llu present, "
                  "%llu/%llu acked present, %llu/%llu recent acked survived, nvme %llu pages, "
                  "recovered %llu\n",
                  run, armed.c_str(), promote ? " promote" : "", Ms(t1 - t0),
                  all ? "full check" : "check", Ms(t2 - t1),
                  check.complete ? "" : " (cut short)",
                  static_cast<unsigned long long>(check.present),
                  static_cast<unsigned long long>(check.checked),
                  static_cast<unsigned long long>(check.acked_present),
                  static_cast<unsigned long long>(check.acked_checked),
                  static_cast<unsigned long long>(check.pending_survived),
                  static_cast<unsigned long long>(check.pending_acked),
                  static_cast<unsigned long long>(check.nvme_pages),
                  static_cast<unsigned long long>(check.recovered_pages));
    }
    totals.Add(check);
    totals.full_checks += all && check.complete;
    if (!check.errors.empty()) {
      ok = false;
      failure = absl::StrCat("after restart ", run, ": ", check.errors);
      break;
    }
    if (LostTooMany(check.acked_present, check.acked_checked)) {
      std::printf("crash-driver: after restart %d: %s\n", run, LossText(check).c_str());
      std::fflush(stdout);
      if (first_loss.empty())
        first_loss = absl::StrCat("after restart ", run, ": ", LossText(check));
      if (absl::GetFlag(FLAGS_fail_fast)) break;
    }
    if (!check.complete) {
      // Only a kill point may cut a check short; a live daemon must answer.
      if (daemon.Alive()) {
        ok = false;
        failure = absl::StrCat("after restart ", run, ": kvtierd stopped answering");
        break;
      }
      ++totals.kills;
      std::string which;
      if (CountKillPointLines(daemon.log_path(), log_from, &which) > 0) ++point_kills[which];
      if (daemon.how_ended() != "SIGKILL") {
        ok = false;
        failure = absl::StrCat("check ", run, " ended with ", daemon.how_ended());
      }
      continue;
    }
    if (run == kills) break;
    work.Retire(daemon.endpoint(), std::max(0, absl::GetFlag(FLAGS_max_live_pages)));
    const bool out_of_time = absl::GetFlag(FLAGS_max_seconds) > 0 &&
        Clock::now() - start > std::chrono::seconds(absl::GetFlag(FLAGS_max_seconds));
    if (out_of_time) {
      std::printf("crash-driver: --max_seconds reached after %d kills\n", run);
      break;
    }
    // One run: PUT until the killer (or a kill point) ends the daemon.
    std::atomic<bool> stop{false}, self_killed{false};
    const int delay = std::uniform_int_distribution<int>(absl::GetFlag(FLAGS_min_delay_ms),
                                                         absl::GetFlag(FLAGS_max_delay_ms))(rng);
    std::thread killer(Killer, daemon.pid(), delay, &stop, &self_killed);
    const uint64_t acked_before = work.ledger().pages_acked();
    work.PutUntil(daemon.endpoint(), stop);
    killer.join();
    if (absl::GetFlag(FLAGS_verbose))
      std::printf("run %d: PUT for %d ms, %llu pages acked, %s\n", run, delay,
                  static_cast<unsigned long long>(work.ledger().pages_acked() - acked_before),
                  self_killed.load() ? "killed by its kill point" : "SIGKILLed");
    daemon.Kill();  // reaps (it is dead already)
    ++totals.kills;
    std::string which;
    if (CountKillPointLines(daemon.log_path(), log_from, &which) > 0) ++point_kills[which];
    if (daemon.how_ended() != "SIGKILL") {
      ok = false;
      failure = absl::StrCat("run ", run, " ended with ", daemon.how_ended(), " (armed: '", armed,
                             "')");
    }
  }
  // A clean stop after all the crashes.
  if (ok && daemon.Alive()) {
    kill(daemon.pid(), SIGTERM);
    for (int i = 0; i < 1000 && daemon.Alive(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (daemon.Alive() || daemon.how_ended() != "exit 0") {
      ok = false;
      failure = absl::StrCat("SIGTERM after the last restart: ", daemon.Alive() ? "still running"
                                                                               : daemon.how_ended());
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  totals.Print(work, point_kills, secs);
  if (ok && totals.survivors == 0 && totals.acked_before_kill > 64 * uint64_t(totals.kills)) {
    ok = false;
    failure = "no acknowledged page survived any kill although many were PUT";
  }
  if (ok && (LostTooMany(totals.survivors, totals.acked_before_kill) ||
             LostTooMany(totals.acked_present, totals.acked_checked))) {
    ok = false;
    failure = absl::StrCat(
        "acknowledged pages lost: ", totals.acked_present, " of ", totals.acked_checked,
        " acknowledged pages read after restarts were present (",
        totals.acked_checked ? 100.0 * totals.acked_present / totals.acked_checked : 100.0,
        "%; at least ", absl::GetFlag(FLAGS_min_survival) * 100, "% wanted); first: ", first_loss);
    if (totals.nvme_capacity > 0 && totals.max_nvme_used * 10 > totals.nvme_capacity * 8)
      absl::StrAppend(&failure, " [NVMe was over 80% full: raise --nvme_bytes, evictions may "
                                "explain losses]");
  }
  if (ok && work.ledger().bad_replies() > 0) {
    ok = false;
    failure = absl::StrCat(work.ledger().bad_replies(), " PUT replies did not add up to the keys "
                           "sent, e.g. ", work.ledger().first_bad_reply());
  }
  const int min_kills = absl::GetFlag(FLAGS_min_kills) < 0 ? kills : absl::GetFlag(FLAGS_min_kills);
  if (ok && totals.kills < min_kills) {
    ok = false;
    failure = absl::StrCat("only ", totals.kills, " kills happened (at least ", min_kills,
                           " wanted)");
  }
  daemon.Kill();
  std::error_code ec;
  std::filesystem::remove_all(sock_dir, ec);
  if (!ok) {
    std::printf("crash-driver: FAIL: %s\nwork directory kept: %s\nkvtierd log tail:\n%s\n",
                failure.c_str(), dir.c_str(), daemon.LogTail(4000).c_str());
    return 1;
  }
  if (!absl::GetFlag(FLAGS_keep_dir)) std::filesystem::remove_all(dir, ec);
  std::printf("crash-driver: PASS\n");
  return 0;
}

}  // namespace
}  // namespace kvtier::crash

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvtier::crash::Main();
}
