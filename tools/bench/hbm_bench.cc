// kvtier-hbm-bench: page copy throughput of the GPU data path through a real
// kvtierd (spawned here, --hbm_device=cuda) against bare cudaMemcpyAsync of
// the same bytes in the same process and run:
//   H2D  GET of host-tier pages into a CUDA IPC client arena  vs pinned H2D
//   D2H  PUT from the arena into the host tier                vs pinned D2H
//   D2D  GET of HBM-tier pages into the arena                 vs device D2D
// Target (issue 6): daemon >= 0.9 x bare for pages >= 1 MiB. Prints a table;
// without a GPU it says so and exits 0.
#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "kvtier/cli.h"
#include "kvtier/client.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/page_key.h"

ABSL_FLAG(std::string, kvtierd, KVTIERD_PATH, "kvtierd binary to spawn");
ABSL_FLAG(std::vector<std::string>, page_kib, std::vector<std::string>({"256", "1024", "4096"}),
          "page sizes in KiB (multiples of 32)");
ABSL_FLAG(int, mib_per_iter, 256, "MiB moved per timed request");
ABSL_FLAG(int, iters, 5, "timed iterations per point (median reported)");
ABSL_FLAG(int, copy_threads, 4, "kvtierd --copy_threads");

extern char** environ;

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kTokenBytes = 8 * 2 * 8 * 128 * 2;  // layers x {K,V} x heads x dim x fp16

double Gbps(uint64_t bytes, double seconds) { return bytes / seconds / 1e9; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double Seconds(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

#define CHECK_CUDA(expr)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Bare {
  double h2d = 0, d2h = 0, d2d = 0;  // GB/s
};

// One cudaMemcpyAsync per page, as a caller without the daemon would do.
Bare MeasureBare(uint64_t page, uint64_t total, int iters) {
  uint8_t *host, *dev_a, *dev_b;
  CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host), total, cudaHostAllocDefault));
  CHECK_CUDA(cudaMalloc(&dev_a, total));
  CHECK_CUDA(cudaMalloc(&dev_b, total));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto run = [&](uint8_t* dst, const uint8_t* src) {
    for (uint64_t off = 0; off < total; off += page)
      CHECK_CUDA(cudaMemcpyAsync(dst + off, src + off, page, cudaMemcpyDefault, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
  };
  Bare out;
  std::vector<double> h2d, d2h, d2d;
  run(dev_a, host);  // warm-up
  for (int i = 0; i < iters; ++i) {
    h2d.push_back(Gbps(total, Seconds([&] { run(dev_a, host); })));
    d2h.push_back(Gbps(total, Seconds([&] { run(host, dev_a); })));
    d2d.push_back(Gbps(total, Seconds([&] { run(dev_b, dev_a); })));
  }
  out = {Median(h2d), Median(d2h), Median(d2d)};
  cudaStreamDestroy(s);
  cudaFree(dev_a);
  cudaFree(dev_b);
  cudaFreeHost(host);
  return out;
}

struct Daemon {
  pid_t pid = -1;
  std::string dir, endpoint;
  ~Daemon() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
  }
};

std::unique_ptr<Daemon> StartDaemon(uint64_t hbm_bytes, uint64_t host_bytes) {
  auto d = std::make_unique<Daemon>();
  char tmpl[] = "/tmp/kvtier-hbm-bench-XXXXXX";
  d->dir = mkdtemp(tmpl);
  d->endpoint = "ipc://" + d->dir + "/kvtierd.sock";
  std::vector<std::string> args = {
      absl::GetFlag(FLAGS_kvtierd), "--socket=" + d->dir + "/kvtierd.sock",
      "--state_dir=" + d->dir + "/state", "--nvme_bytes=0", "--hbm_device=cuda",
      absl::StrCat("--hbm_bytes=", hbm_bytes), absl::StrCat("--host_bytes=", host_bytes),
      absl::StrCat("--copy_threads=", absl::GetFlag(FLAGS_copy_threads)), "--log_level=warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawn(&d->pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start %s\n", argv[0]);
    std::exit(1);
  }
  for (int i = 0; i < 600; ++i) {  // CUDA init and pinning the host arena take a while
    ClientOptions o{.endpoint = d->endpoint, .timeout = std::chrono::milliseconds(200)};
    if (Client::Connect(o).ok()) return d;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "kvtierd did not come up\n");
  std::exit(1);
}

struct Through {
  double get = 0, put = 0;  // GB/s
};

// PUT then GET of `total` bytes of `page`-byte pages between a CUDA arena
// and the daemon, one request each; pages deleted between iterations.
Through MeasureDaemon(const std::string& endpoint, uint64_t page, uint64_t total, int iters) {
  const uint32_t tokens = static_cast<uint32_t>(page / kTokenBytes);
  Layout layout{8, 8, 128, tokens, Dtype::kFp16};
  auto c = Client::Connect({.endpoint = endpoint, .layout = layout, .client_name = "hbm-bench",
                            .timeout = std::chrono::milliseconds(60000)});
  if (!c.ok()) std::exit((std::fprintf(stderr, "%s\n", c.status().ToString().c_str()), 1));
  auto arena = GpuArena::Create(total, ArenaKind::kCuda);
  if (!arena.ok()) std::exit((std::fprintf(stderr, "%s\n", arena.status().ToString().c_str()), 1));
  auto id = (*arena)->Register(**c);
  if (!id.ok()) std::exit((std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1));
  const size_t n = total / page;
  std::vector<uint32_t> ids(n * tokens);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i * 2654435761u + page);
  auto keys = DeriveChain(layout.Id(), tokens, ids);
  std::vector<uint64_t> offsets(n);
  for (size_t i = 0; i < n; ++i) offsets[i] = i * page;
  std::vector<double> gets, puts;
  for (int i = 0; i <= iters; ++i) {  // iteration 0 warms up
    absl::StatusOr<PutResult> put;
    double tp = Seconds([&] { put = (*c)->Put(keys, PageKey::Zero(), *id, offsets); });
    absl::StatusOr<std::vector<TierKind>> got;
    double tg = Seconds([&] { got = (*c)->Get(keys, *id, offsets); });
    if (!put.ok() || put->stored != n || !got.ok()) {
      std::fprintf(stderr, "page %lu: put %s (stored %u of %zu), get %s\n", page,
                   put.status().ToString().c_str(), put.ok() ? put->stored : 0, n,
                   got.status().ToString().c_str());
      std::exit(1);
    }
    (void)(*c)->Delete(keys);
    if (i == 0) continue;
    puts.push_back(Gbps(total, tp));
    gets.push_back(Gbps(total, tg));
  }
  return {Median(gets), Median(puts)};
}

void Row(const char* path, uint64_t page, double daemon, double bare) {
  std::printf("%-4s %6lu KiB  %8.2f GB/s  %8.2f GB/s   %5.2f%s\n", path, page >> 10, daemon, bare,
              daemon / bare, page >= (1 << 20) && daemon < 0.9 * bare ? "  (below 0.9 target)" : "");
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "GPU page copy throughput through a real kvtierd (spawned here, --hbm_device=cuda) "
      "against bare cudaMemcpyAsync of the same bytes: H2D (GET of host pages into a CUDA IPC "
      "arena), D2H (PUT), D2D (GET of HBM pages). Without a GPU it says so and exits 0.\n"
      "  kvtier-hbm-bench [--page_kib=256,1024,4096] [--mib_per_iter=256] [--iters=5]");
  std::string why;
  if (!kvtier::GpuArena::CudaAvailable(&why)) {
    std::printf("kvtier-hbm-bench: no CUDA device (%s); nothing measured\n", why.c_str());
    return 0;
  }
  const uint64_t total = uint64_t(absl::GetFlag(FLAGS_mib_per_iter)) << 20;
  const int iters = absl::GetFlag(FLAGS_iters);
  std::vector<uint64_t> pages;
  for (const auto& s : absl::GetFlag(FLAGS_page_kib)) pages.push_back(std::stoull(s) << 10);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("kvtier-hbm-bench on %s: %lu MiB per request, median of %d\n", prop.name,
              total >> 20, iters);
  std::printf("path     page      daemon          bare         ratio\n");
  std::vector<kvtier::Bare> bare;
  for (uint64_t p : pages) bare.push_back(kvtier::MeasureBare(p, total, iters));
  {
    auto d = kvtier::StartDaemon(0, 2 * total);  // pages live in the (pinned) host tier
    for (size_t i = 0; i < pages.size(); ++i) {
      auto t = kvtier::MeasureDaemon(d->endpoint, pages[i], total, iters);
      kvtier::Row("H2D", pages[i], t.get, bare[i].h2d);
      kvtier::Row("D2H", pages[i], t.put, bare[i].d2h);
    }
  }
  {
    auto d = kvtier::StartDaemon(2 * total, 256 << 20);  // pages live in the HBM tier
    for (size_t i = 0; i < pages.size(); ++i) {
      auto t = kvtier::MeasureDaemon(d->endpoint, pages[i], total, iters);
      kvtier::Row("D2D", pages[i], t.get, bare[i].d2d);
    }
  }
  return 0;
}
