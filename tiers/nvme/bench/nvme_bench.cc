// kvtier-nvme-bench: random read/write throughput of the NVMe tier's file
// device (tiers/nvme) per block size and queue depth, the figures that
// scripts/bench_nvme.sh sets beside fio's. Links the device directly: it
// measures the I/O engine, not the daemon.
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "kvtier/byte_size.h"
#include "kvtier/cli.h"
#include "nlohmann/json.hpp"
#include "tiers/nvme/device.h"

ABSL_FLAG(std::string, dir, "", "directory on the disk to measure (required)");
ABSL_FLAG(std::string, file_size, "2GiB", "size of the test file (at most 2GiB by default)");
ABSL_FLAG(std::string, block_sizes, "256KiB,1MiB,4MiB", "I/O sizes");
ABSL_FLAG(std::string, depths, "1,32", "queue depths (I/Os in flight)");
ABSL_FLAG(std::string, ops, "randread,randwrite", "randread and/or randwrite");
ABSL_FLAG(double, seconds, 1.5, "seconds per timed repeat");
ABSL_FLAG(int, repeats, 3, "repeats per case; the median is reported");
ABSL_FLAG(int, io_threads, 1, "io_uring rings / I/O threads");
ABSL_FLAG(std::string, engine, "auto", "auto, io_uring or thread_pool");
ABSL_FLAG(bool, register_buffers, true, "register the I/O buffers with io_uring");
ABSL_FLAG(bool, allow_tmpfs, false, "allow --dir on tmpfs (measures the engine alone)");
ABSL_FLAG(bool, fill, true, "write the whole file once before measuring (skip when reusing it)");
ABSL_FLAG(bool, keep_file, false, "leave the test file for fio (scripts/bench_nvme.sh)");
ABSL_FLAG(std::string, json, "", "also write the results to this JSON file");

namespace {

using kvtier::tiers::nvme::Device;
using Clock = std::chrono::steady_clock;

bool ParseBytes(absl::string_view s, uint64_t* out) {
  absl::StatusOr<uint64_t> v = kvtier::ParseByteSize(s);
  if (v.ok()) *out = *v;
  return v.ok();
}

std::vector<uint64_t> ParseList(const std::string& s, bool bytes) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    uint64_t v;
    if (!(bytes ? ParseBytes(part, &v) : absl::SimpleAtoi(part, &v)) || v == 0) {
      std::cerr << "bad list element: " << part << "\n";
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

// One timed run: `qd` lanes, each keeping one I/O of `bs` bytes at a random
// bs-aligned offset in flight until the deadline (the next I/O is issued from
// the completion callback, like a tier's I/O pipeline). Returns MiB/s.
double RunOnce(Device& dev, bool write, uint64_t bs, uint32_t qd, double seconds, char* arena,
               uint64_t seed) {
  struct Lane {
    std::mt19937_64 rng;
    char* buf;
  };
  const uint64_t slots = dev.size() / bs;
  std::vector<Lane> lanes(qd);
  std::atomic<uint64_t> bytes{0}, errors{0};
  std::atomic<uint32_t> running{qd};
  absl::Notification all_done;
  std::atomic<int64_t> last_ns{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::function<void(Lane&)> issue;
  auto on_done = [&](Lane& lane, absl::Status s) {
    if (s.ok()) {
      bytes.fetch_add(bs, std::memory_order_relaxed);
    } else if (errors.fetch_add(1) == 0) {
      std::cerr << "I/O error: " << s << "\n";
    }
    const Clock::time_point now = Clock::now();
    if (now < deadline && s.ok()) return issue(lane);
    const int64_t ns = (now - start).count();
    int64_t prev = last_ns.load(std::memory_order_relaxed);
    while (ns > prev && !last_ns.compare_exchange_weak(prev, ns)) {
    }
    if (running.fetch_sub(1) == 1) all_done.Notify();
  };
  issue = [&](Lane& lane) {
    const uint64_t off = (lane.rng() % slots) * bs;
    auto cb = [&lane, &on_done](absl::Status s) { on_done(lane, std::move(s)); };
    if (write) {
      dev.WriteAsync(off, lane.buf, bs, cb);
    } else {
      dev.ReadAsync(off, lane.buf, bs, cb);
    }
  };
  for (uint32_t i = 0; i < qd; ++i) {
    lanes[i].rng.seed(seed * 1000 + i);
    lanes[i].buf = arena + uint64_t{i} * bs;
  }
  for (Lane& lane : lanes) issue(lane);
  all_done.WaitForNotification();
  if (errors.load() > 0) std::exit(1);
  const double secs = static_cast<double>(last_ns.load()) / 1e9;
  return static_cast<double>(bytes.load()) / secs / (1 << 20);
}

// Writes the whole file once, so reads hit written blocks (not unwritten
// extents, which read as zeros without touching the disk) and random writes
// overwrite in place, as in a tier's steady state.
void Fill(Device& dev, char* arena, uint64_t chunk, uint32_t qd) {
  std::atomic<uint64_t> next{0};
  std::atomic<uint32_t> running{qd};
  absl::Notification done;
  std::function<void(uint32_t)> issue = [&](uint32_t lane) {
    const uint64_t off = next.fetch_add(chunk);
    if (off >= dev.size()) {
      if (running.fetch_sub(1) == 1) done.Notify();
      return;
    }
    const uint64_t n = std::min(chunk, dev.size() - off);
    dev.WriteAsync(off, arena + uint64_t{lane} * chunk, n, [&, lane](absl::Status s) {
      if (!s.ok()) {
        std::cerr << "fill: " << s << "\n";
        std::exit(1);
      }
      issue(lane);
    });
  };
  for (uint32_t i = 0; i < qd; ++i) issue(i);
  done.WaitForNotification();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "random read/write throughput of the NVMe tier's file device (the I/O engine, not the "
      "daemon) per block size and queue depth; scripts/bench_nvme.sh sets fio's figures "
      "beside these.\n"
      "  kvtier-nvme-bench --dir=/var/tmp/x [--block_sizes=256KiB,1MiB,4MiB] [--depths=1,32]");
  const std::string dir = absl::GetFlag(FLAGS_dir);
  uint64_t size = 0;
  if (dir.empty() || !ParseBytes(absl::GetFlag(FLAGS_file_size), &size) || size == 0) {
    std::cerr << "usage: kvtier-nvme-bench --dir=DIR [--file_size=2GiB]\n";
    return 2;
  }
  const auto block_sizes = ParseList(absl::GetFlag(FLAGS_block_sizes), true);
  const auto depths = ParseList(absl::GetFlag(FLAGS_depths), false);
  const uint64_t max_bs = *std::max_element(block_sizes.begin(), block_sizes.end());
  const uint32_t max_qd = static_cast<uint32_t>(*std::max_element(depths.begin(), depths.end()));
  size = size / max_bs * max_bs;

  std::filesystem::create_directories(dir);
  const std::string path = dir + "/kvtier-nvme-bench.dat";
  struct statvfs vfs;
  std::error_code ec;
  const uint64_t existing = std::filesystem::exists(path) ? std::filesystem::file_size(path, ec) : 0;
  if (::statvfs(dir.c_str(), &vfs) == 0 &&
      uint64_t{vfs.f_bavail} * vfs.f_frsize + existing < size + (1ull << 30)) {
    std::cerr << dir << ": not enough free disk for a " << size << "-byte file plus 1 GiB\n";
    return 1;
  }

  kvtier::tiers::nvme::FileDeviceConfig config;
  config.path = path;
  config.size = size;
  config.io_threads = absl::GetFlag(FLAGS_io_threads);
  config.queue_depth = std::max<uint32_t>(64, max_qd);
  config.allow_tmpfs = absl::GetFlag(FLAGS_allow_tmpfs);
  const std::string engine = absl::GetFlag(FLAGS_engine);
  config.engine = engine == "io_uring"      ? kvtier::tiers::nvme::IoEngineKind::kIoUring
                  : engine == "thread_pool" ? kvtier::tiers::nvme::IoEngineKind::kThreadPool
                                            : kvtier::tiers::nvme::IoEngineKind::kAuto;
  auto dev_or = kvtier::tiers::nvme::CreateFileDevice(config);
  if (!dev_or.ok()) {
    std::cerr << dev_or.status() << "\n";
    return 1;
  }
  Device& dev = **dev_or;

  // One shared-memory arena for every lane, like the host tier's shm pool.
  const uint64_t arena_bytes = uint64_t{max_qd} * max_bs;
  void* arena_p = ::mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (arena_p == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  char* arena = static_cast<char*>(arena_p);
  std::memset(arena, 0x5a, arena_bytes);
  if (absl::GetFlag(FLAGS_register_buffers)) {
    absl::Status s = dev.RegisterBufferRegion(arena, arena_bytes);
    if (!s.ok()) std::cerr << "register: " << s << "\n";
  }

  std::cout << "# " << dev.Describe() << "\n";
  if (absl::GetFlag(FLAGS_fill)) {
    const Clock::time_point t0 = Clock::now();
    Fill(dev, arena, max_bs, max_qd);
    if (absl::Status s = dev.Flush(); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    const double fill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::cout << absl::StrFormat("# filled %u MiB in %.2f s (%.0f MiB/s)\n", size >> 20,
                                 fill_s, (size >> 20) / fill_s);
  }
  std::cout << absl::StrFormat("%-10s %8s %4s %10s   %s\n", "op", "bs", "qd", "MiB/s",
                               "samples");

  nlohmann::json results = nlohmann::json::array();
  uint64_t seed = 1;
  for (uint64_t bs : block_sizes) {
    for (uint64_t qd : depths) {
      for (absl::string_view op :
           absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
        if (op != "randread" && op != "randwrite") {
          std::cerr << "unknown op " << op << " (randread, randwrite)\n";
          return 2;
        }
        const bool write = op == "randwrite";
        std::vector<double> samples;
        for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
          samples.push_back(RunOnce(dev, write, bs, static_cast<uint32_t>(qd),
                                    absl::GetFlag(FLAGS_seconds), arena, seed++));
        }
        const double med = Median(samples);
        std::string list;
        for (double v : samples) list += absl::StrFormat("%.0f ", v);
        std::cout << absl::StrFormat("%-10s %7uK %4u %10.0f   %s\n", op, bs >> 10, qd, med, list);
        results.push_back({{"op", std::string(op)}, {"bs", bs}, {"qd", qd},
                           {"mib_s", med}, {"samples", samples}});
      }
    }
  }
  const auto st = dev.stats();
  std::cout << absl::StrFormat("# device: %u reads, %u writes, %u errors, max in flight %u\n",
                               st.reads, st.writes, st.read_errors + st.write_errors,
                               st.max_inflight);
  if (const std::string json = absl::GetFlag(FLAGS_json); !json.empty()) {
    std::ofstream(json) << nlohmann::json{{"device", dev.Describe()},
                                          {"file", path},
                                          {"file_size", size},
                                          {"results", results}}
                               .dump(2)
                        << "\n";
  }
  dev_or->reset();
  ::munmap(arena_p, arena_bytes);
  if (!absl::GetFlag(FLAGS_keep_file)) std::filesystem::remove(path, ec);
  return 0;
}
