// Progress bar and time-series sampler of kvtier-stress.
#include "tools/stress/progress.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace kvtier::stress {

ProgressMonitor::ProgressMonitor(const Counters& c, uint64_t total_requests, uint64_t page_bytes,
                                 bool bar, std::chrono::milliseconds sample_interval)
    : c_(c), total_(total_requests), page_bytes_(page_bytes), bar_(bar),
      interval_(sample_interval) {}

ProgressMonitor::~ProgressMonitor() { Stop(); }

void ProgressMonitor::Start() {
  start_ = std::chrono::steady_clock::now();
  start_unix_s_ = std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  thread_ = std::thread([this] { Loop(); });
}

void ProgressMonitor::Stop() {
  if (!thread_.joinable()) return;
  done_.Notify();
  thread_.join();
  samples_.push_back(TakeSample(c_, Elapsed(), page_bytes_));
  if (bar_) std::fprintf(stderr, "\r\033[K");
}

double ProgressMonitor::Elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressMonitor::Loop() {
  const auto tick = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(250), interval_);
  auto next_sample = std::chrono::steady_clock::now() + interval_;
  while (!done_.WaitForNotificationWithTimeout(absl::FromChrono(tick))) {
    const Sample s = TakeSample(c_, Elapsed(), page_bytes_);
    if (bar_) Draw(s);
    if (std::chrono::steady_clock::now() >= next_sample) {
      samples_.push_back(s);
      next_sample += interval_;
    }
  }
}

void ProgressMonitor::Draw(const Sample& s) const {
  constexpr int kWidth = 30;
  const double frac = total_ ? static_cast<double>(s.requests) / total_ : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double hit = s.pages ? 100.0 * s.hit_pages / s.pages : 0;
  const double gbps = s.elapsed_s > 0 ? (s.get_bytes + s.put_bytes) / s.elapsed_s / 1e9 : 0;
  const double eta = frac > 0 ? s.elapsed_s * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r\033[K[%s%s] %llu/%llu req  hit %.1f%%  %.1f req/s  %.2f GB/s  "
               "errors %llu  corrupt %llu  ETA %.0fs",
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
               static_cast<unsigned long long>(s.requests),
               static_cast<unsigned long long>(total_), hit,
               s.elapsed_s > 0 ? s.requests / s.elapsed_s : 0, gbps,
               static_cast<unsigned long long>(s.errors),
               static_cast<unsigned long long>(s.corrupt_pages), eta);
  std::fflush(stderr);
}

}  // namespace kvtier::stress
