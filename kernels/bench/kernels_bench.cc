// kvtier-kernels-bench: decode attention at long context (default 8k, the
// 124m shape: 12 layers, 12 kv heads x 64, tokens_per_page 256) reported as
// KV bytes read per second by the kernel over memcpy bandwidth measured in
// the same run, plus prefill throughput. Medians over --repeats.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "kvtier/cli.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/kernels/page_ops.h"
#include "kvtier/layout.h"

ABSL_FLAG(int, context, 8192, "decode context length (tokens in the cache)");
ABSL_FLAG(int, layers, 12, "layers decoded per step (KV of all layers exceeds the caches)");
ABSL_FLAG(int, kv_heads, 12, "kv heads");
ABSL_FLAG(int, q_heads, 12, "query heads");
ABSL_FLAG(int, head_dim, 64, "head dim");
ABSL_FLAG(int, tokens_per_page, 256, "tokens per page (the decoder's default)");
ABSL_FLAG(std::string, dtypes, "fp32,fp16", "page dtypes to run, comma separated");
ABSL_FLAG(int, repeats, 15, "timed repeats (median reported)");
ABSL_FLAG(int, prefill_tokens, 2048, "prefill length (one layer, from an empty cache)");

namespace kvtier::kernels {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double MedianSeconds(int repeats, Fn fn) {
  fn();  // warm up (page faults, worker threads)
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// memcpy of `bytes` (1 thread and all threads); returns bytes copied per second.
double MemcpyBandwidth(size_t bytes, int repeats, int threads) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  const double s = MedianSeconds(repeats, [&] {
    std::vector<std::thread> ts;
    const size_t chunk = (bytes + threads - 1) / threads;
    for (int i = 0; i < threads; ++i) {
      ts.emplace_back([&, i] {
        const size_t lo = std::min(bytes, i * chunk);
        std::memcpy(dst.data() + lo, src.data() + lo, std::min(bytes, lo + chunk) - lo);
      });
    }
    for (auto& t : ts) t.join();
  });
  return double(bytes) / s;
}

struct Model {
  Layout layout;
  std::vector<uint64_t> arena;
  std::vector<int32_t> table;
  PagedKv kv;
};

Model MakeModel(Dtype dtype, uint32_t context) {
  Model m;
  m.layout = {uint32_t(absl::GetFlag(FLAGS_layers)), uint32_t(absl::GetFlag(FLAGS_kv_heads)),
              uint32_t(absl::GetFlag(FLAGS_head_dim)),
              uint32_t(absl::GetFlag(FLAGS_tokens_per_page)), dtype};
  const uint32_t pages = (context + m.layout.tokens_per_page - 1) / m.layout.tokens_per_page;
  m.arena.assign(m.layout.PageBytes() * pages / 8 + 1, 0);
  m.kv = MakePagedKv(m.layout, m.arena.data(), pages);
  for (uint32_t i = 0; i < pages; ++i) m.table.push_back(int32_t(pages - 1 - i));  // reversed
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const size_t row = size_t(m.layout.kv_heads) * m.layout.head_dim;
  std::vector<float> k(row * context), v(row * context);
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  for (uint32_t l = 0; l < m.layout.layers; ++l) {
    m.kv.layer = l;
    (void)ScatterKvCpu({m.kv, m.table.data(), pages, 0, context, k.data(), v.data()});
  }
  return m;
}

void BenchDecode(Dtype dtype, double memcpy_bw) {
  const uint32_t context = absl::GetFlag(FLAGS_context), q_heads = absl::GetFlag(FLAGS_q_heads);
  Model m = MakeModel(dtype, context);
  const uint32_t d = m.layout.head_dim;
  std::vector<float> q(q_heads * d, 0.1f), out(q.size());
  int32_t len = int32_t(context);
  DecodeParams p{m.kv, 1, q_heads, 1.f / std::sqrt(float(d)), 0, q.data(), out.data(),
                 m.table.data(), uint32_t(m.table.size()), &len, context};
  std::vector<uint8_t> ws(DecodeWorkspaceBytesCpu(p));
  const double s = MedianSeconds(absl::GetFlag(FLAGS_repeats), [&] {
    for (uint32_t l = 0; l < m.layout.layers; ++l) {
      p.kv.layer = l;
      (void)PagedDecodeCpu(p, {ws.data(), ws.size()});
    }
  });
  // Bytes the kernel must read: K and V (with scales) of every token, all layers.
  const double bytes = double(m.layout.LayerBytes()) / m.layout.tokens_per_page * context *
                       m.layout.layers;
  std::printf("decode %-4s ctx=%u: %.3f ms/step (%u layers), KV read %.2f GB/s, "
              "ratio to memcpy %.2f\n",
              std::string(DtypeName(dtype)).c_str(), context, s * 1e3, m.layout.layers,
              bytes / s / 1e9, bytes / s / memcpy_bw);
}

void BenchPrefill(Dtype dtype) {
  const uint32_t n = absl::GetFlag(FLAGS_prefill_tokens), q_heads = absl::GetFlag(FLAGS_q_heads);
  Model m = MakeModel(dtype, n);
  const uint32_t d = m.layout.head_dim;
  std::vector<float> q(size_t(n) * q_heads * d, 0.05f), out(q.size());
  PrefillParams p{m.kv, q_heads, 1.f / std::sqrt(float(d)), 0, q.data(), out.data(),
                  m.table.data(), uint32_t(m.table.size()), 0, n};
  std::vector<uint8_t> ws(PrefillWorkspaceBytesCpu(p));
  const double s = MedianSeconds(std::max(3, absl::GetFlag(FLAGS_repeats) / 5),
                                 [&] { (void)PagedPrefillCpu(p, {ws.data(), ws.size()}); });
  const double flops = 4.0 * d * q_heads * (double(n) * (n + 1) / 2);
  std::printf("prefill %-4s %u tokens (1 layer, causal): %.1f ms, %.0f tokens/s, %.1f GFLOP/s\n",
              std::string(DtypeName(dtype)).c_str(), n, s * 1e3, n / s, flops / s / 1e9);
}

}  // namespace
}  // namespace kvtier::kernels

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "decode attention at long context (default 8k tokens, the 124m shape) as KV bytes read "
      "per second over memcpy bandwidth measured in the same run, plus prefill throughput; "
      "medians over --repeats.\n"
      "  kvtier-kernels-bench [--context=8192] [--dtypes=fp32,fp16] [--repeats=15]");
  using namespace kvtier::kernels;
  const int threads = CpuThreads(), repeats = absl::GetFlag(FLAGS_repeats);
  const size_t bytes = 256ull << 20;
  const double bw1 = MemcpyBandwidth(bytes, repeats, 1), bwn = MemcpyBandwidth(bytes, repeats, threads);
  const double bw = std::max(bw1, bwn);
  std::printf("kernels: isa=%s threads=%d\n", CpuKernelIsa(), threads);
  std::printf("memcpy 256 MiB: %.2f GB/s (1 thread), %.2f GB/s (%d threads); ratio uses %.2f GB/s "
              "(bytes copied per second)\n",
              bw1 / 1e9, bwn / 1e9, threads, bw / 1e9);
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ','))) {
    auto dtype = kvtier::ParseDtype(name);
    if (!dtype.ok()) {
      std::fprintf(stderr, "%s\n", dtype.status().ToString().c_str());
      return 2;
    }
    BenchDecode(*dtype, bw);
  }
  for (const std::string& name : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ','))) {
    BenchPrefill(*kvtier::ParseDtype(name));
  }
  return 0;
}
