// kvtier-io-class-bench: what the device's I/O classes buy a demand read.
// Background lanes keep write-back writes and prefetch reads in flight (more
// than the queue depth, so a queue forms, as when the evictor and the
// prefetcher are both busy) while one lane times demand reads, one at a
// time. Each repeat runs twice on the same file: with classes (each lane
// issues under its own class) and FIFO (every lane as demand: one class, so
// first come, first served). Reports demand-read p50/p99 and background
// throughput per mode, medians over repeats, and the ratios.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "kvtier/byte_size.h"
#include "kvtier/cli.h"
#include "tiers/common/io_class.h"
#include "tiers/nvme/device.h"

ABSL_FLAG(std::string, dir, "", "directory on the disk to measure (required)");
ABSL_FLAG(std::string, file_size, "1GiB", "size of the test file (written once first)");
ABSL_FLAG(std::string, block_size, "1MiB", "bytes per I/O, every lane");
ABSL_FLAG(uint32_t, queue_depth, 64, "the device's queue depth (--nvme_queue_depth)");
ABSL_FLAG(uint32_t, writeback_lanes, 64, "lanes keeping one write-back write in flight each");
ABSL_FLAG(uint32_t, prefetch_lanes, 48, "lanes keeping one prefetch read in flight each");
ABSL_FLAG(double, seconds, 3, "seconds per mode and repeat");
ABSL_FLAG(int, repeats, 5, "repeats (modes alternate within each); medians reported");
ABSL_FLAG(double, prefetch_share, 0.25, "FileDeviceConfig.prefetch_share");
ABSL_FLAG(double, writeback_share, 0.125, "FileDeviceConfig.writeback_share");

namespace {

namespace nvme = kvtier::tiers::nvme;
using kvtier::tiers::IoClass;
using kvtier::tiers::IoClassScope;
using Clock = std::chrono::steady_clock;

struct ModeResult {
  double p50_us = 0, p99_us = 0, bg_mib_s = 0;
  size_t samples = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// Background lanes: each re-issues its I/O from its completion (on the I/O
// thread), under its own class, until `stop`.
class Background {
 public:
  Background(nvme::Device& dev, char* arena, uint64_t bs, bool classes)
      : dev_(dev), arena_(arena), bs_(bs), classes_(classes) {}

  void Start(uint32_t writers, uint32_t readers) {
    lanes_ = writers + readers;
    running_ = lanes_;
    for (uint32_t i = 0; i < lanes_; ++i) {
      const bool write = i < writers;
      Issue(i, write ? IoClass::kWriteback : IoClass::kPrefetch, write);
    }
  }
  // Stops re-issuing, waits for the lanes to drain; returns MiB/s moved.
  double Stop(double seconds) {
    stop_.store(true);
    done_.WaitForNotification();
    return static_cast<double>(bytes_.load()) / seconds / (1 << 20);
  }

 private:
  void Issue(uint32_t lane, IoClass cls, bool write) {
    IoClassScope scope(classes_ ? cls : IoClass::kDemand);
    const uint64_t slots = dev_.size() / bs_;
    const uint64_t off = (std::hash<uint64_t>()(lane * 7919 + seq_.fetch_add(1)) % slots) * bs_;
    char* buf = arena_ + uint64_t{lane} * bs_;
    auto cb = [this, lane, cls, write](absl::Status s) {
      if (s.ok()) bytes_.fetch_add(bs_, std::memory_order_relaxed);
      if (!stop_.load() && s.ok()) return Issue(lane, cls, write);
      if (running_.fetch_sub(1) == 1) done_.Notify();
    };
    if (write) {
      dev_.WriteAsync(off, buf, bs_, cb);
    } else {
      dev_.ReadAsync(off, buf, bs_, cb);
    }
  }

  nvme::Device& dev_;
  char* arena_;
  const uint64_t bs_;
  const bool classes_;
  uint32_t lanes_ = 0;
  std::atomic<uint32_t> running_{0};
  std::atomic<uint64_t> seq_{0}, bytes_{0};
  std::atomic<bool> stop_{false};
  absl::Notification done_;
};

ModeResult RunMode(nvme::Device& dev, char* arena, uint64_t bs, bool classes, uint64_t seed) {
  const uint32_t writers = absl::GetFlag(FLAGS_writeback_lanes);
  const uint32_t readers = absl::GetFlag(FLAGS_prefetch_lanes);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  char* demand_buf = arena + uint64_t{writers + readers} * bs;
  Background bg(dev, arena, bs, classes);
  bg.Start(writers, readers);
  std::mt19937_64 rng(seed);
  std::vector<double> lat;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    IoClassScope scope(IoClass::kDemand);
    const uint64_t off = (rng() % (dev.size() / bs)) * bs;
    absl::Notification done;
    const Clock::time_point t0 = Clock::now();
    dev.ReadAsync(off, demand_buf, bs, [&](absl::Status s) {
      if (!s.ok()) std::cerr << "demand read: " << s << "\n";
      done.Notify();
    });
    done.WaitForNotification();
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // an engine's think time
  }
  ModeResult r;
  r.bg_mib_s = bg.Stop(seconds);
  r.p50_us = Percentile(lat, 0.5);
  r.p99_us = Percentile(lat, 0.99);
  r.samples = lat.size();
  return r;
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "demand-read latency on the NVMe tier's file device under write-back and prefetch load, "
      "with I/O classes and first come, first served (tiers/common/io_class.h).\n"
      "  kvtier-io-class-bench --dir=/var/tmp/x [--writeback_lanes=64] [--prefetch_lanes=48]");
  const std::string dir = absl::GetFlag(FLAGS_dir);
  auto size = kvtier::ParseByteSize(absl::GetFlag(FLAGS_file_size));
  auto bs = kvtier::ParseByteSize(absl::GetFlag(FLAGS_block_size));
  if (dir.empty() || !size.ok() || !bs.ok() || *bs == 0 || *bs % nvme::kBlockSize != 0) {
    std::cerr << "usage: kvtier-io-class-bench --dir=DIR [--file_size=1GiB] [--block_size=1MiB]\n";
    return 2;
  }
  std::filesystem::create_directories(dir);
  nvme::FileDeviceConfig config;
  config.path = dir + "/kvtier-io-class-bench.dat";
  config.size = *size / *bs * *bs;
  config.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  config.prefetch_share = absl::GetFlag(FLAGS_prefetch_share);
  config.writeback_share = absl::GetFlag(FLAGS_writeback_share);
  auto dev = nvme::CreateFileDevice(config);
  if (!dev.ok()) {
    std::cerr << dev.status() << "\n";
    return 1;
  }
  const uint32_t lanes = absl::GetFlag(FLAGS_writeback_lanes) + absl::GetFlag(FLAGS_prefetch_lanes) + 1;
  const uint64_t arena_bytes = uint64_t{lanes} * *bs;
  void* p = ::mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  char* arena = static_cast<char*>(p);
  std::memset(arena, 0x5a, arena_bytes);
  // Written once, so reads touch the disk (unwritten extents read as zeros).
  for (uint64_t off = 0; off < config.size; off += *bs) {
    if (absl::Status s = (*dev)->Write(off, arena, *bs); !s.ok()) {
      std::cerr << "fill: " << s << "\n";
      return 1;
    }
  }
  if (absl::Status s = (*dev)->Flush(); !s.ok()) std::cerr << "flush: " << s << "\n";
  std::cout << "# " << (*dev)->Describe() << "\n# " << absl::GetFlag(FLAGS_writeback_lanes)
            << " write-back + " << absl::GetFlag(FLAGS_prefetch_lanes)
            << " prefetch lanes, one demand reader, " << (*bs >> 10) << " KiB I/Os\n";
  std::vector<double> p50[2], p99[2], bg[2];
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    for (int mode = 0; mode < 2; ++mode) {  // 0: FIFO, 1: classes
      const bool classes = (mode == 1) != (r % 2 == 1);  // alternate which goes first
      const ModeResult m = RunMode(**dev, arena, *bs, classes, 1000 + r);
      const int k = classes ? 1 : 0;
      p50[k].push_back(m.p50_us);
      p99[k].push_back(m.p99_us);
      bg[k].push_back(m.bg_mib_s);
      std::cout << absl::StrFormat("repeat %d %-7s demand read p50 %8.0f us  p99 %8.0f us  (%zu reads)  background %6.0f MiB/s\n",
                                   r, classes ? "classes" : "fifo", m.p50_us, m.p99_us, m.samples,
                                   m.bg_mib_s);
    }
  }
  const double f50 = Median(p50[0]), f99 = Median(p99[0]), c50 = Median(p50[1]), c99 = Median(p99[1]);
  std::cout << absl::StrFormat(
      "median  fifo    p50 %8.0f us  p99 %8.0f us  background %6.0f MiB/s\n"
      "median  classes p50 %8.0f us  p99 %8.0f us  background %6.0f MiB/s\n"
      "classes/fifo: demand p50 %.2fx, p99 %.2fx; background throughput %.2fx\n",
      f50, f99, Median(bg[0]), c50, c99, Median(bg[1]), c50 / f50, c99 / f99,
      Median(bg[1]) / Median(bg[0]));
  dev->reset();
  ::munmap(p, arena_bytes);
  std::error_code ec;
  std::filesystem::remove(config.path, ec);
  return 0;
}
