// Victim latency probe and /proc readers; see victim_probe.h.
#include "tests/security/victim_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kvtier.pb.h"

namespace kvtier::security {

using Clock = std::chrono::steady_clock;

LatencySummary Summarize(std::vector<double> ms) {
  LatencySummary s;
  s.n = ms.size();
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto rank = [&ms](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * ms.size()));
    return ms[std::min(ms.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.p50_ms = rank(0.50);
  s.p99_ms = rank(0.99);
  s.max_ms = ms.back();
  return s;
}

VictimProbe::VictimProbe(const std::string& endpoint, const std::string& tenant,
                         const std::string& token, std::chrono::milliseconds period)
    : period_(period) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.tenant = tenant;
  o.token = token;
  o.client_name = "victim-probe";
  o.timeout = std::chrono::milliseconds(5000);
  auto c = Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "victim probe: cannot connect: %s\n", c.status().ToString().c_str());
    return;
  }
  client_ = *std::move(c);
  thread_ = std::thread([this] { Loop(); });
}

VictimProbe::~VictimProbe() {
  if (!stopped_) {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
}

void VictimProbe::Loop() {
  while (!stop_.load()) {
    const auto t0 = Clock::now();
    auto r = client_->Ping();
    const auto t1 = Clock::now();
    ms_.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (!r.ok()) ++errors_;
    std::this_thread::sleep_until(t0 + period_);
  }
}

LatencySummary VictimProbe::Stop(const std::string& attack) {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  stopped_ = true;
  LatencySummary s = Summarize(ms_);
  s.errors = errors_;
  std::printf("SECURITY_PING attack=%s n=%zu p50_ms=%.3f p99_ms=%.3f max_ms=%.3f errors=%zu\n",
              attack.c_str(), s.n, s.p50_ms, s.p99_ms, s.max_ms, s.errors);
  std::fflush(stdout);
  return s;
}

uint64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line.substr(prefix.size()), ' ', absl::SkipWhitespace());
    uint64_t kb = 0;
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb)) return kb * 1024;
    return 0;
  }
  return 0;
}

PeakSampler::PeakSampler(pid_t pid, std::string field) : pid_(pid), field_(std::move(field)) {
  peak_ = ProcStatusBytes(pid_, field_);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      uint64_t v = ProcStatusBytes(pid_, field_);
      uint64_t p = peak_.load();
      while (v > p && !peak_.compare_exchange_weak(p, v)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
}

PeakSampler::~PeakSampler() { Stop(); }

uint64_t PeakSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  return peak_.load();
}

}  // namespace kvtier::security
