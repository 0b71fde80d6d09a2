// kvtier-seal-bench: what sealing costs on the shared cache's PUT and GET
// paths. Times Seal and Open of one page against a plain memcpy of the same
// bytes (the floor any GET pays), at 256 KiB and 1 MiB; prints JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"
#include "kvtier/cli.h"
#include "nlohmann/json.hpp"
#include "tiers/shared_cache/cache_keys.h"
#include "tiers/shared_cache/sealed_record.h"

ABSL_FLAG(int, repeats, 7, "timed repeats per mode and size; the median is reported");
ABSL_FLAG(int, iterations, 256, "pages sealed, opened and copied per repeat");

namespace kvtier::tiers::shared_cache {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Round3(double x) { return std::round(x * 1000) / 1000; }

// GB/s of `iterations` runs of `op` over `bytes` bytes each.
template <typename Op>
double Gbps(int iterations, size_t bytes, Op op) {
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) op();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * iterations / 1e9 / s;
}

[[noreturn]] void Die(absl::string_view what) {
  std::fprintf(stderr, "kvtier-seal-bench: %.*s\n", static_cast<int>(what.size()), what.data());
  std::exit(1);
}

nlohmann::json BenchSize(const TenantKeys& keys, size_t bytes, int repeats, int iterations) {
  std::string body(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) body[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::vector<uint8_t> dst(bytes);
  const absl::string_view ns = "bench";
  PageKey key;
  key.bytes[0] = 1;
  auto record = Seal(keys.current, ns, key, PageKey::Zero(), body);
  if (!record.ok()) Die(record.status().ToString());

  auto seal = [&] {
    auto r = Seal(keys.current, ns, key, PageKey::Zero(), body);
    if (!r.ok() || r->size() != bytes + kSealOverheadBytes) Die("Seal failed");
  };
  auto open = [&] {
    auto r = Open(keys, *record, ns, key, bytes, dst.data(), nullptr);
    if (!r.ok()) Die(r.status().ToString());
  };
  auto copy = [&] { std::memcpy(dst.data(), body.data(), bytes); };
  seal(), open(), copy();  // warm the caches, the allocator and OpenSSL

  // Modes interleave within a repeat, so a noisy moment hits all three.
  std::vector<double> seal_gbps, open_gbps, copy_gbps;
  volatile uint8_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    seal_gbps.push_back(Gbps(iterations, bytes, seal));
    open_gbps.push_back(Gbps(iterations, bytes, open));
    copy_gbps.push_back(Gbps(iterations, bytes, copy));
    sink = sink + dst[r % bytes];  // the copies are used, so they stay
  }
  if (std::memcmp(dst.data(), body.data(), bytes) != 0) Die("Open returned other bytes");
  const double s = Median(seal_gbps), o = Median(open_gbps), c = Median(copy_gbps);
  return {{"page_bytes", bytes},          {"seal_gbps", Round3(s)},
          {"open_gbps", Round3(o)},       {"memcpy_gbps", Round3(c)},
          {"seal_vs_memcpy", Round3(s / c)}, {"open_vs_memcpy", Round3(o / c)}};
}

int Run() {
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  if (repeats < 1 || iterations < 1) Die("--repeats and --iterations must be at least 1");
  // A fixed, made-up secret: the bench measures the cipher, not the keys.
  ClusterSecrets secrets;
  secrets.secrets.emplace_back();
  for (size_t i = 0; i < kClusterSecretBytes; ++i) secrets.secrets[0][i] = uint8_t(i + 1);
  auto keys = DeriveTenantKeys(secrets, "bench", "bench-secret");
  if (!keys.ok()) Die(keys.status().ToString());

  nlohmann::json out = {{"program", "kvtier-seal-bench"},
                        {"cipher", "AES-256-GCM"},
                        {"repeats", repeats},
                        {"iterations", iterations},
                        {"gb", "1e9 bytes"},
                        {"sizes", nlohmann::json::array()}};
  for (size_t bytes : {size_t{256} << 10, size_t{1} << 20}) {
    out["sizes"].push_back(BenchSize(*keys, bytes, repeats, iterations));
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace kvtier::tiers::shared_cache

int main(int argc, char* argv[]) {
  kvtier::ParseCommandLine(
      argc, argv,
      "Seal and Open throughput of shared-cache records (AES-256-GCM) against memcpy of the "
      "same bytes, at 256 KiB and 1 MiB pages; medians over repeats, printed as JSON.\n"
      "Usage: kvtier-seal-bench [--repeats=7 --iterations=256]");
  return kvtier::tiers::shared_cache::Run();
}
