// kvtier-gpu-decoder-bench: the CUDA decoder's benchmarks (issue 16;
// tests/gpu/run.sh starts the daemons and runs every mode).
//  kernel: paged decode kernel at a 32k context, 8B KV shapes (32 layers x 8
//          KV heads x 128): KV bytes read per second vs a device-to-device
//          cudaMemcpy measured in the same run.
//  ttft:   8B shapes, random bf16 weights made on the GPU: TTFT of each
//          --prompt_tokens prompt, recompute vs restore into GPU memory from
//          each daemon given (--hbm_endpoint, --host_endpoint,
//          --nvme_endpoint); then decode tokens/s with that cached context.
//  seeds:  the seeds' comparison on the GPU: 124m, 4-token prompt + 200 new
//          tokens, cached decode vs recomputing the sequence every step.
// Medians over --repeats; ratios are against a baseline of the same run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "bench_util.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/sampler.h"
#include "kvtier/decoder/session.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/kernels/cuda.h"

ABSL_FLAG(std::string, mode, "all", "kernel, ttft, seeds or all");
ABSL_FLAG(std::string, size, "llama3-8b", "ttft: model size (llama3-8b: random on the GPU)");
ABSL_FLAG(std::string, prompt_tokens, "8192,32768", "ttft: prompt lengths");
ABSL_FLAG(uint32_t, decode_tokens, 64, "ttft: tokens decoded after the longest cached prompt");
ABSL_FLAG(uint32_t, repeats, 3, "repeats of the cheap measurements (median)");
ABSL_FLAG(uint32_t, recompute_repeats, 1, "repeats of the recompute prefill");
ABSL_FLAG(uint32_t, tokens_per_page, 64, "tokens per KV page (8B: 8 MiB pages at 64)");
ABSL_FLAG(std::string, kv_dtype, "bf16", "KV page dtype");
ABSL_FLAG(std::string, gpu_weights, "bf16", "weight dtype on the GPU");
ABSL_FLAG(std::string, hbm_endpoint, "", "ttft: kvtierd with an HBM tier (--hbm_device=cuda)");
ABSL_FLAG(std::string, host_endpoint, "", "ttft: kvtierd whose pages stay in host RAM");
ABSL_FLAG(std::string, nvme_endpoint, "", "ttft: kvtierd whose pages stay on NVMe");
ABSL_FLAG(uint32_t, kernel_context, 32768, "kernel: context length");
ABSL_FLAG(uint32_t, copy_mib, 1024, "kernel: device-to-device copy size");
ABSL_FLAG(uint32_t, seeds_new_tokens, 200, "seeds: new tokens");

namespace {

using namespace kvtier::decoder;  // NOLINT: a benchmark main
using bench::Check;
using bench::Die;
using bench::Median;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a) { return std::chrono::duration<double, std::milli>(Clock::now() - a).count(); }


void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e))));
}

std::vector<uint32_t> BenchPrompt(uint32_t n, uint32_t salt = 0) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 2654435761u + 11 + salt * 7919u) % 256;
  return t;
}

std::unique_ptr<DecoderSession> GpuSession(const std::string& size, uint32_t pages) {
  SessionOptions o;
  o.size = size;
  o.device = DeviceKind::kCuda;
  o.cuda.weights = Check(ParseGpuWeights(absl::GetFlag(FLAGS_gpu_weights)));
  o.tokens_per_page = absl::GetFlag(FLAGS_tokens_per_page);
  o.kv_dtype = Check(kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
  o.kv_pages = pages;
  o.use_daemon = false;
  auto t0 = Clock::now();
  auto s = Check(DecoderSession::Create(o));
  const ModelConfig& c = s->weights().config;
  absl::PrintF("model %s: %u layers x %u hidden, %u heads (%u KV) x %u, vocab %u; %s; page %s; ready in %.1f s\n",
               size, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
               c.head_dim, c.vocab_size, s->model().device()->Describe(),
               s->cache().layout().DebugString(), Ms(t0) / 1000);
  return s;
}

// Times `fn` (GPU work on stream 0) with events; returns ms.
template <typename Fn>
double EventMs(Fn fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  fn();
  cudaEventRecord(b);
  CheckCuda(cudaEventSynchronize(b), "kernel bench");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

double CopyGBps(uint64_t bytes, uint32_t repeats) {
  void *src = nullptr, *dst = nullptr;
  CheckCuda(cudaMalloc(&src, bytes), "cudaMalloc copy src");
  CheckCuda(cudaMalloc(&dst, bytes), "cudaMalloc copy dst");
  cudaMemset(src, 1, bytes);
  std::vector<double> ms;
  for (uint32_t r = 0; r <= repeats; ++r) {
    double t = EventMs([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0); });
    if (r > 0) ms.push_back(t);  // the first is a warm-up
  }
  cudaFree(src);
  cudaFree(dst);
  return bytes / (Median(ms) * 1e6);
}

void KernelBench() {
  using namespace kvtier::kernels;  // NOLINT
  const uint32_t ctx = absl::GetFlag(FLAGS_kernel_context), tpp = absl::GetFlag(FLAGS_tokens_per_page);
  const kvtier::Layout layout{32, 8, 128, tpp, Check(kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)))};
  const uint32_t pages = (ctx + tpp - 1) / tpp;
  void* arena = nullptr;
  CheckCuda(cudaMalloc(&arena, uint64_t(pages) * layout.PageBytes()), "cudaMalloc arena");
  cudaMemset(arena, 0, uint64_t(pages) * layout.PageBytes());
  std::vector<int32_t> table(pages);
  for (uint32_t i = 0; i < pages; ++i) table[i] = int32_t(i);
  const int32_t len = int32_t(ctx);
  int32_t *d_table = nullptr, *d_len = nullptr;
  float *q = nullptr, *out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d_table), pages * 4);
  cudaMalloc(reinterpret_cast<void**>(&d_len), 4);
  cudaMalloc(reinterpret_cast<void**>(&q), 32 * 128 * 4);
  cudaMalloc(reinterpret_cast<void**>(&out), 32 * 128 * 4);
  cudaMemcpy(d_table, table.data(), pages * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_len, &len, 4, cudaMemcpyHostToDevice);
  cudaMemset(q, 0, 32 * 128 * 4);
  PagedKv kv = MakePagedKv(layout, arena, pages);
  DecodeParams p{kv, 1, 32, 1.0f / std::sqrt(128.0f), 0, q, out, d_table, pages, d_len, ctx};
  void* ws = nullptr;
  const size_t ws_bytes = DecodeWorkspaceBytesCuda(p);
  cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1));
  auto all_layers = [&] {
    for (uint32_t l = 0; l < 32; ++l) {
      p.kv.layer = l;
      CheckCuda(PagedDecodeCuda(p, {ws, ws_bytes}, 0), "PagedDecodeCuda");
    }
  };
  std::vector<double> ms;
  for (uint32_t r = 0; r <= absl::GetFlag(FLAGS_repeats) + 2; ++r) {
    double t = EventMs(all_layers);
    if (r > 0) ms.push_back(t);
  }
  const double kv_bytes = double(ctx) * 8 * 128 * 2 * kv.ElemBytes() * 32;
  const double kernel_gbps = kv_bytes / (Median(ms) * 1e6);
  const double copy_gbps = CopyGBps(uint64_t(absl::GetFlag(FLAGS_copy_mib)) << 20, absl::GetFlag(FLAGS_repeats) + 2);
  absl::PrintF("kernel: paged decode, context %u, 32 layers x 8 KV heads x 128 (%s, %u-token pages): "
               "%.3f ms per token, KV read %.1f GB/s\n",
               ctx, kvtier::DtypeName(layout.dtype), tpp, Median(ms), kernel_gbps);
  absl::PrintF("kernel: device-to-device cudaMemcpy %u MiB: %.1f GB/s copied (%.1f GB/s read+write)\n",
               absl::GetFlag(FLAGS_copy_mib), copy_gbps, 2 * copy_gbps);
  absl::PrintF("kernel: KV read / copy rate = %.2fx (target >= 0.7); / (read+write) = %.2fx\n",
               kernel_gbps / copy_gbps, kernel_gbps / (2 * copy_gbps));
  for (void* ptr : {arena, ws, static_cast<void*>(d_table), static_cast<void*>(d_len),
                    static_cast<void*>(q), static_cast<void*>(out)})
    cudaFree(ptr);
}

struct Daemon {
  std::string name;
  std::unique_ptr<PrefixStore> store;
};

std::vector<Daemon> ConnectDaemons(DecoderSession& s) {
  std::vector<Daemon> out;
  const std::pair<const char*, std::string> eps[] = {{"hbm", absl::GetFlag(FLAGS_hbm_endpoint)},
                                                     {"host", absl::GetFlag(FLAGS_host_endpoint)},
                                                     {"nvme", absl::GetFlag(FLAGS_nvme_endpoint)}};
  for (const auto& [name, endpoint] : eps) {
    if (endpoint.empty()) continue;
    kvtier::ClientOptions o;
    o.endpoint = endpoint;
    o.client_name = "kvtier-gpu-decoder-bench";
    o.timeout = std::chrono::milliseconds(600000);
    out.push_back({name, Check(PrefixStore::Connect(o, &s.cache(), s.fingerprint()))});
  }
  return out;
}

std::string Tiers(const GenerateStats& st) {
  std::map<std::string, int> n;
  for (kvtier::TierKind t : st.restored_from) ++n[std::string(kvtier::TierKindName(t))];
  std::string s;
  for (const auto& [k, v] : n) absl::StrAppend(&s, s.empty() ? "" : "+", v, " ", k);
  return s.empty() ? "none" : s;
}

// Recompute TTFT (prefill + argmax) of `prompt`; the first run's pages are
// PUT to every daemon from GPU memory.
double RecomputeAndStore(DecoderSession& s, std::vector<Daemon>& daemons,
                         const std::vector<uint32_t>& prompt) {
  std::vector<double> ms;
  std::vector<float> logits;
  for (uint32_t r = 0; r < std::max(1u, absl::GetFlag(FLAGS_recompute_repeats)); ++r) {
    const SeqId seq = s.cache().AddSequence();
    auto t0 = Clock::now();
    if (auto st = s.model().Forward({{seq, prompt}}, &logits); !st.ok()) Die(st);
    (void)Argmax(logits);
    ms.push_back(Ms(t0));
    for (Daemon& d : daemons) {
      if (r > 0) break;
      auto t1 = Clock::now();
      kvtier::PutResult put = Check(d.store->Publish(seq, prompt));
      absl::PrintF("  PUT %u tokens to %s: %u pages stored, %u deduplicated, %u not stored, %.0f ms\n",
                   uint32_t(prompt.size()), d.name, put.stored, put.deduplicated, put.not_stored, Ms(t1));
      d.store->Forget(seq);
    }
    (void)s.cache().RemoveSequence(seq);
  }
  return Median(ms);
}

void TtftBench() {
  std::vector<uint32_t> lengths;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_prompt_tokens), ',')) {
    uint32_t n;
    if (!absl::SimpleAtoi(p, &n) || n < 2) Die(absl::InvalidArgumentError("--prompt_tokens"));
    lengths.push_back(n);
  }
  const uint32_t longest = *std::max_element(lengths.begin(), lengths.end());
  const uint32_t tpp = absl::GetFlag(FLAGS_tokens_per_page);
  auto s = GpuSession(absl::GetFlag(FLAGS_size), (longest + absl::GetFlag(FLAGS_decode_tokens)) / tpp + 2);
  std::vector<Daemon> daemons = ConnectDaemons(*s);
  {  // warm-up: cuBLAS picks and loads its kernels on the first GEMMs
    std::vector<float> logits;
    const SeqId seq = s->cache().AddSequence();
    if (auto st = s->model().Forward({{seq, BenchPrompt(512, 1)}}, &logits); !st.ok()) Die(st);
    (void)s->cache().RemoveSequence(seq);
  }
  for (uint32_t n : lengths) {
    const std::vector<uint32_t> prompt = BenchPrompt(n, n);
    const double recompute = RecomputeAndStore(*s, daemons, prompt);
    absl::PrintF("ttft: %u tokens: recompute %.1f ms\n", n, recompute);
    for (Daemon& d : daemons) {
      std::vector<double> ttft, restore;
      GenerateResult last;
      for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
        Generator g(&s->model(), d.store.get());
        last = Check(g.Generate(prompt, {.max_new_tokens = 1, .stop_at_eos = false}));
        ttft.push_back(last.stats.ttft_ms);
        restore.push_back(last.stats.restore_ms);
      }
      absl::PrintF("ttft: %u tokens: restore from %s: TTFT %.1f ms (restore %.1f ms; %u tokens from %s; %s) = %.1fx vs recompute\n",
                   n, d.name, Median(ttft), Median(restore), last.stats.restored_tokens, Tiers(last.stats),
                   last.stats.reuse_note.empty() ? "ok" : last.stats.reuse_note, recompute / Median(ttft));
    }
  }
  const std::vector<uint32_t> prompt = BenchPrompt(longest, longest);
  PrefixStore* store = daemons.empty() ? nullptr : daemons.front().store.get();
  Generator g(&s->model(), store);
  GenerateResult r = Check(g.Generate(prompt, {.max_new_tokens = absl::GetFlag(FLAGS_decode_tokens),
                                               .stop_at_eos = false}));
  absl::PrintF("decode: %u tokens after a cached %u-token context (%s): %.1f tokens/s (restored %u tokens)\n",
               r.stats.new_tokens, longest, store ? daemons.front().name : "recomputed",
               r.stats.DecodeTokensPerS(), r.stats.restored_tokens);
}

// Greedy generation that recomputes the whole sequence at every step.
std::vector<uint32_t> Recompute(Model& model, std::vector<uint32_t> tokens, uint32_t n) {
  std::vector<uint32_t> out;
  std::vector<float> logits;
  for (uint32_t i = 0; i < n; ++i) {
    SeqId seq = model.cache().AddSequence();
    if (auto st = model.Forward({{seq, tokens}}, &logits); !st.ok()) Die(st);
    (void)model.cache().RemoveSequence(seq);
    out.push_back(Argmax(logits));
    tokens.push_back(out.back());
  }
  return out;
}

void SeedsBench() {
  const uint32_t n = absl::GetFlag(FLAGS_seeds_new_tokens), tpp = absl::GetFlag(FLAGS_tokens_per_page);
  auto s = GpuSession("124m", (4 + n) / tpp + 2);
  const std::vector<uint32_t> prompt = BenchPrompt(4);
  std::vector<double> cached, uncached;
  std::vector<uint32_t> ct, ut;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    auto t0 = Clock::now();
    ct = Check(s->generator().Generate(prompt, {.max_new_tokens = n, .stop_at_eos = false})).tokens;
    cached.push_back(Ms(t0));
  }
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    auto t0 = Clock::now();
    ut = Recompute(s->model(), prompt, n);
    uncached.push_back(Ms(t0));
  }
  absl::PrintF("seeds: 124m, 4-token prompt + %u new tokens on the GPU: cached %.1f ms (%.1f tokens/s), "
               "uncached %.1f ms (%.1f tokens/s): %.2fx; same tokens: %s\n",
               n, Median(cached), n * 1000 / Median(cached), Median(uncached), n * 1000 / Median(uncached),
               Median(uncached) / Median(cached), ct == ut ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(argc, argv,
                           "the CUDA decoder's benchmarks: paged decode kernel vs device copy "
                           "bandwidth, 8B-shape TTFT recompute vs restore from kvtierd, decode "
                           "tokens/s, the seeds' cached vs uncached decode.\n"
                           "  kvtier-gpu-decoder-bench --mode=kernel|ttft|seeds|all [flags]");
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (!CudaDecoderBuilt() || !kvtier::kernels::CudaAvailable())
    Die(absl::FailedPreconditionError("no usable CUDA device (or a build without CUDA)"));
  if (mode == "kernel" || mode == "all") KernelBench();
  if (mode == "seeds" || mode == "all") SeedsBench();
  if (mode == "ttft" || mode == "all") TtftBench();
  if (mode != "kernel" && mode != "seeds" && mode != "ttft" && mode != "all")
    Die(absl::InvalidArgumentError(absl::StrCat("unknown --mode ", mode)));
  return 0;
}
