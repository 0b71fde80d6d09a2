// kvtierctl top / watch: a STATS snapshot every --interval, with per-second
// rates between consecutive snapshots. On a terminal the screen is redrawn
// and 'q' (or Ctrl-C) quits; otherwise (a pipe, a log) each refresh is
// printed below the last, or as one JSON line with --json, --count times.
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "client/wire_calls.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

std::atomic<bool> g_interrupted{false};

// Puts the terminal in non-canonical, no-echo mode so 'q' arrives at once;
// restores it on destruction.
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

// Waits up to `seconds`; true when the user asked to quit.
bool WaitOrQuit(double seconds, bool keys) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_interrupted.load()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{keys ? STDIN_FILENO : -1, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100))) > 0 &&
        (p.revents & POLLIN)) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) return true;
    }
  }
  return true;
}

double PerSec(uint64_t now, uint64_t before, double dt) {
  return dt > 0 && now >= before ? double(now - before) / dt : 0;
}

nlohmann::json Rates(const wire::StatsReply& now, const wire::StatsReply& prev, double dt) {
  nlohmann::json j;
  j["requests_per_s"] = PerSec(now.daemon().requests(), prev.daemon().requests(), dt);
  j["errors_per_s"] = PerSec(now.daemon().request_errors(), prev.daemon().request_errors(), dt);
  for (int i = 0; i < now.tiers_size() && i < prev.tiers_size(); ++i) {
    const auto &a = now.tiers(i), &b = prev.tiers(i);
    j["tiers"][a.name()] = {{"hits_per_s", PerSec(a.hits(), b.hits(), dt)},
                            {"misses_per_s", PerSec(a.misses(), b.misses(), dt)},
                            {"evictions_per_s", PerSec(a.evictions(), b.evictions(), dt)},
                            {"bytes_in_per_s", PerSec(a.bytes_in(), b.bytes_in(), dt)},
                            {"bytes_out_per_s", PerSec(a.bytes_out(), b.bytes_out(), dt)}};
  }
  for (const auto& a : now.namespaces())
    for (const auto& b : prev.namespaces())
      if (a.name() == b.name())
        j["namespaces"][a.name()] = {
            {"get_hits_per_s", PerSec(a.get_hits(), b.get_hits(), dt)},
            {"get_misses_per_s", PerSec(a.get_misses(), b.get_misses(), dt)},
            {"puts_per_s", PerSec(a.puts(), b.puts(), dt)},
            {"lookup_keys_per_s", PerSec(a.lookup_hits() + a.lookup_misses(),
                                         b.lookup_hits() + b.lookup_misses(), dt)}};
  return j;
}

void PrintRates(const nlohmann::json& r) {
  std::printf("\nRATES (per second over the last interval): requests %.1f, errors %.1f\n",
              r["requests_per_s"].get<double>(), r["errors_per_s"].get<double>());
  if (r.contains("tiers")) {
    std::printf("%-6s %10s %10s %10s %12s %12s\n", "TIER", "HITS/s", "MISSES/s", "EVICT/s",
                "IN/s", "OUT/s");
    for (const auto& [name, t] : r["tiers"].items())
      std::printf("%-6s %10.1f %10.1f %10.1f %12s %12s\n", name.c_str(),
                  t["hits_per_s"].get<double>(), t["misses_per_s"].get<double>(),
                  t["evictions_per_s"].get<double>(),
                  Bytes(uint64_t(t["bytes_in_per_s"].get<double>())).c_str(),
                  Bytes(uint64_t(t["bytes_out_per_s"].get<double>())).c_str());
  }
  if (r.contains("namespaces")) {
    std::printf("%-16s %10s %10s %10s %12s\n", "NAMESPACE", "GET-HIT/s", "GET-MISS/s", "PUTS/s",
                "LOOKUP-KEY/s");
    for (const auto& [name, n] : r["namespaces"].items())
      std::printf("%-16s %10.1f %10.1f %10.1f %12.1f\n", name.c_str(),
                  n["get_hits_per_s"].get<double>(), n["get_misses_per_s"].get<double>(),
                  n["puts_per_s"].get<double>(), n["lookup_keys_per_s"].get<double>());
  }
}

void Show(const wire::StatsReply& now, const nlohmann::json& rates, bool json, bool tty) {
  if (json) {
    nlohmann::json j = ToJson(now);
    j["rates"] = rates;
    std::printf("%s\n", j.dump().c_str());  // one line per refresh
  } else {
    if (tty) std::printf("\x1b[H\x1b[2J");  // home + clear
    PrintStatsTables(now);
    PrintRates(rates);
    std::printf(tty ? "\n(q or Ctrl-C to quit)\n" : "----\n");
  }
  std::fflush(stdout);
}

}  // namespace

int CmdTop(const Options& o) {
  if (!(o.interval_s > 0)) return Fail("--interval must be > 0 seconds", kUsage);
  auto client = Connect(o);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_interrupted = true; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool tty = isatty(STDOUT_FILENO) && !o.json;
  RawTerminal raw;  // no-op without a terminal on stdin
  const bool keys = isatty(STDIN_FILENO);
  wire::StatsReply prev;
  auto prev_time = std::chrono::steady_clock::now();
  for (int i = 0; o.count <= 0 || i < o.count; ++i) {
    auto stats = WireStats(**client);
    const auto now_time = std::chrono::steady_clock::now();
    if (!stats.ok()) return Fail(std::string(stats.status().message()));
    const double dt = std::chrono::duration<double>(now_time - prev_time).count();
    Show(*stats, Rates(*stats, i == 0 ? *stats : prev, i == 0 ? 0 : dt), o.json, tty);
    prev = *std::move(stats);
    prev_time = now_time;
    if (o.count > 0 && i + 1 >= o.count) break;
    if (WaitOrQuit(o.interval_s, keys)) break;
  }
  return kOk;
}

}  // namespace kvtier::ctl
