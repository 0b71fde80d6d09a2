// kvtier-decoder-bench: the decoder's benchmarks (docs/BENCHMARKS.md).
//  decode: 124m random weights, 4-token prompt, 200 new tokens: cached decode
//          vs recomputing the whole sequence every step (same tokens both ways).
//  ttft:   TTFT of an 8,192-token prompt: recompute vs restored through kvtierd
//          from the host tier (--endpoint) and from the NVMe tier
//          (--nvme_endpoint: a daemon with a tiny host tier and
//          --promote_on_get=false, so its pages stay on NVMe).
// scripts/bench_decoder.sh starts the daemons and runs both.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kvtier/decoder/sampler.h"
#include "kvtier/decoder/session.h"

ABSL_FLAG(std::string, mode, "all", "decode, ttft or all");
ABSL_FLAG(std::string, size, "124m", "random weights of this named size");
ABSL_FLAG(std::string, model, "", "or a checkpoint directory");
ABSL_FLAG(uint32_t, decode_prompt_tokens, 4, "decode: prompt length");
ABSL_FLAG(uint32_t, new_tokens, 200, "decode: tokens to generate");
ABSL_FLAG(uint32_t, prompt_tokens, 8192, "ttft: prompt length");
ABSL_FLAG(uint32_t, repeats, 5, "repeats of the cheap measurements (median reported)");
ABSL_FLAG(uint32_t, recompute_repeats, 1, "repeats of the expensive recompute measurements");
ABSL_FLAG(uint32_t, tokens_per_page, 256, "tokens per KV page");
ABSL_FLAG(std::string, kv_dtype, "fp16", "KV page dtype");
ABSL_FLAG(std::string, endpoint, "", "ttft: kvtierd whose pages stay in the host tier");
ABSL_FLAG(std::string, nvme_endpoint, "", "ttft: kvtierd whose pages sit on NVMe (empty: skip)");

namespace {

using namespace kvtier::decoder;  // NOLINT: a benchmark main
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a) { return std::chrono::duration<double, std::milli>(Clock::now() - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<uint32_t> BenchPrompt(uint32_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 2654435761u + 11) % 256;
  return t;
}

[[noreturn]] void Die(const absl::Status& st) {
  absl::FPrintF(stderr, "kvtier-decoder-bench: %s\n", st.ToString());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) Die(v.status());
  return *std::move(v);
}

std::unique_ptr<DecoderSession> MakeSession(uint32_t pages, const std::string& endpoint) {
  SessionOptions o;
  o.checkpoint_dir = absl::GetFlag(FLAGS_model);
  o.size = absl::GetFlag(FLAGS_size);
  o.tokens_per_page = absl::GetFlag(FLAGS_tokens_per_page);
  o.kv_dtype = Check(kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
  o.kv_pages = pages;
  o.use_daemon = !endpoint.empty();
  o.client.endpoint = endpoint;
  o.client.client_name = "kvtier-decoder-bench";
  o.client.timeout = std::chrono::milliseconds(120000);
  auto s = Check(DecoderSession::Create(o));
  if (o.use_daemon && s->store() == nullptr) Die(absl::UnavailableError(s->daemon_note()));
  const ModelConfig& c = s->weights().config;
  absl::PrintF("model: %u layers x %u hidden x %u heads (%u KV), vocab %u, %.1fM parameters; page %s\n",
               c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
               c.vocab_size, s->weights().ParameterCount() / 1e6, s->cache().layout().DebugString());
  return s;
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

void DecodeBench() {
  const uint32_t n = absl::GetFlag(FLAGS_new_tokens), p = absl::GetFlag(FLAGS_decode_prompt_tokens);
  const uint32_t tpp = absl::GetFlag(FLAGS_tokens_per_page);
  auto s = MakeSession((p + n + tpp - 1) / tpp + 1, "");
  std::vector<uint32_t> prompt = BenchPrompt(p);
  GenerateOptions g{.max_new_tokens = n, .stop_at_eos = false};
  std::vector<double> cached_ms, recompute_ms;
  std::vector<uint32_t> cached_tokens, recompute_tokens;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    auto t0 = Clock::now();
    GenerateResult res = Check(s->generator().Generate(prompt, g));
    cached_ms.push_back(Ms(t0));
    cached_tokens = res.tokens;
  }
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_recompute_repeats); ++r) {
    auto t0 = Clock::now();
    recompute_tokens = Recompute(s->model(), prompt, n);
    recompute_ms.push_back(Ms(t0));
  }
  const double c = Median(cached_ms), f = Median(recompute_ms);
  absl::PrintF("decode: %u-token prompt, %u new tokens\n", p, n);
  absl::PrintF("  cached decode   %9.1f ms  (%.1f tokens/s; median of %zu: %s)\n", c, n / c * 1e3,
               cached_ms.size(), absl::StrJoin(cached_ms, ", ", [](std::string* o, double v) { absl::StrAppendFormat(o, "%.0f", v); }));
  absl::PrintF("  recompute       %9.1f ms  (%.1f tokens/s; %zu run(s))\n", f, n / f * 1e3, recompute_ms.size());
  absl::PrintF("  speedup %.2fx; same tokens: %s\n", f / c, cached_tokens == recompute_tokens ? "yes" : "NO");
  if (cached_tokens != recompute_tokens) {
    size_t i = 0;
    while (cached_tokens[i] == recompute_tokens[i]) ++i;
    absl::PrintF("  first difference at token %zu\n", i);
  }
}

// Waits until at least `want` of the prompt's pages report `tier`.
void WaitForTier(PrefixStore& store, const std::vector<kvtier::PageKey>& keys, kvtier::TierKind tier,
                 size_t want) {
  for (int i = 0; i < 600; ++i) {
    auto l = Check(store.client().Lookup(keys));
    if (size_t(std::count(l.tiers.begin(), l.tiers.end(), tier)) >= want) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  absl::PrintF("  (warning: pages did not reach tier %s within 60 s)\n", kvtier::TierKindName(tier));
}

struct Warm {
  double ttft_ms, restore_ms;
  GenerateResult last;
};

Warm Restored(DecoderSession& s, PrefixStore* store, const std::vector<uint32_t>& prompt) {
  Generator g(&s.model(), store);
  std::vector<double> ttft, restore;
  GenerateResult last;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    last = Check(g.Generate(prompt, {.max_new_tokens = 4, .stop_at_eos = false}));
    ttft.push_back(last.stats.ttft_ms);
    restore.push_back(last.stats.restore_ms);
  }
  return {Median(ttft), Median(restore), last};
}

std::string Tiers(const GenerateStats& st) {
  int host = 0, nvme = 0;
  for (kvtier::TierKind t : st.restored_from) (t == kvtier::TierKind::kNvme ? nvme : host)++;
  return absl::StrFormat("%u tokens restored, %u computed; pages from host %d, nvme %d",
                         st.restored_tokens, st.computed_tokens, host, nvme);
}

void TtftBench() {
  const uint32_t n = absl::GetFlag(FLAGS_prompt_tokens), tpp = absl::GetFlag(FLAGS_tokens_per_page);
  const std::string nvme_ep = absl::GetFlag(FLAGS_nvme_endpoint);
  auto s = MakeSession((n + 4 + tpp - 1) / tpp + 1, absl::GetFlag(FLAGS_endpoint));
  std::unique_ptr<PrefixStore> nvme;
  if (!nvme_ep.empty()) {
    kvtier::ClientOptions o{.endpoint = nvme_ep, .client_name = "kvtier-decoder-bench",
                            .timeout = std::chrono::milliseconds(120000)};
    nvme = Check(PrefixStore::Connect(o, &s->cache(), ModelFingerprint(s->weights())));
  }
  std::vector<uint32_t> prompt = BenchPrompt(n);
  // Recompute: the full prefill, exactly what Generate does without a store.
  std::vector<double> recompute;
  uint32_t first = 0;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_recompute_repeats); ++r) {
    SeqId seq = s->cache().AddSequence();
    std::vector<float> logits;
    auto t0 = Clock::now();
    if (auto st = s->model().Forward({{seq, prompt}}, &logits); !st.ok()) Die(st);
    first = Argmax(logits);
    recompute.push_back(Ms(t0));
    if (r == 0) {  // store the computed pages in both daemons
      Check(s->store()->Publish(seq, prompt));
      if (nvme) Check(nvme->Publish(seq, prompt));
    }
    (void)s->cache().RemoveSequence(seq);
  }
  const double rc = Median(recompute);
  absl::PrintF("ttft: %u-token prompt\n  recompute            %9.1f ms (%zu run(s))\n", n, rc, recompute.size());
  const auto keys = kvtier::DeriveChain(s->cache().layout().Id(), tpp,
                                        absl::MakeConstSpan(prompt).first((n - 1) / tpp * tpp),
                                        ModelFingerprint(s->weights()));
  Warm host = Restored(*s, s->store(), prompt);
  absl::PrintF("  restored from host   %9.1f ms (GET %.1f ms; median of %u) -> %.0fx; %s; same first token: %s\n",
               host.ttft_ms, host.restore_ms, absl::GetFlag(FLAGS_repeats), rc / host.ttft_ms,
               Tiers(host.last.stats), host.last.tokens[0] == first ? "yes" : "NO");
  if (!nvme) return;
  WaitForTier(*nvme, keys, kvtier::TierKind::kNvme, keys.size() - 2);
  Warm nv = Restored(*s, nvme.get(), prompt);
  absl::PrintF("  restored from NVMe   %9.1f ms (GET %.1f ms; median of %u) -> %.0fx; %s; same first token: %s\n",
               nv.ttft_ms, nv.restore_ms, absl::GetFlag(FLAGS_repeats), rc / nv.ttft_ms, Tiers(nv.last.stats),
               nv.last.tokens[0] == first ? "yes" : "NO");
  absl::PrintF("  same 4 tokens host vs NVMe restore: %s\n", host.last.tokens == nv.last.tokens ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kvtier-decoder-bench --mode=decode|ttft|all [--endpoint=... --nvme_endpoint=...]");
  absl::ParseCommandLine(argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows when piped to a log
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "decode" || mode == "all") DecodeBench();
  if (mode == "ttft" || mode == "all") {
    if (absl::GetFlag(FLAGS_endpoint).empty()) Die(absl::InvalidArgumentError("ttft needs --endpoint"));
    TtftBench();
  }
  return 0;
}
