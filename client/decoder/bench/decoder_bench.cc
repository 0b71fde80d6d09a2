// kvtier-decoder-bench: the decoder's benchmarks (docs/BENCHMARKS.md).
//  decode: 124m random weights, 4-token prompt, 200 new tokens: cached decode
//          vs recomputing the whole sequence every step (same tokens both ways).
//  ttft:   TTFT of an 8,192-token prompt: recompute vs restored through kvtierd
//          from the host tier (--endpoint) and from the NVMe tier
//          (--nvme_endpoint: a daemon with a tiny host tier and
//          --promote_on_get=false, so its pages stay on NVMe).
//  layerwise: the same prompt (plus --suffix_tokens new ones) restored from
//          each daemon with whole-page vs layer-wise GET (prefill of layer l
//          starts once layer l of every page has arrived): TTFT medians.
// scripts/bench_decoder.sh starts the daemons and runs both.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench_util.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/sampler.h"
#include "kvtier/decoder/session.h"

ABSL_FLAG(std::string, mode, "all", "decode, ttft, layerwise or all");
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
ABSL_FLAG(bool, layerwise, false, "ttft: restore with the layer-wise GET");
ABSL_FLAG(uint32_t, suffix_tokens, 0,
          "layerwise: new tokens after the stored prompt (prefill work to overlap with the copy)");

namespace {

using namespace kvtier::decoder;  // NOLINT: a benchmark main
using bench::Check;
using bench::Die;
using bench::Median;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a) { return std::chrono::duration<double, std::milli>(Clock::now() - a).count(); }

std::vector<uint32_t> BenchPrompt(uint32_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 2654435761u + 11) % 256;
  return t;
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

GenerateResult Once(DecoderSession& s, PrefixStore* store, const std::vector<uint32_t>& prompt,
                    bool layerwise) {
  Generator g(&s.model(), store);
  return Check(g.Generate(prompt, {.max_new_tokens = 4, .stop_at_eos = false,
                                   .layerwise_restore = layerwise}));
}

struct Warm {
  double ttft_ms, restore_ms;
  GenerateResult last;
};

Warm Restored(DecoderSession& s, PrefixStore* store, const std::vector<uint32_t>& prompt) {
  std::vector<double> ttft, restore;
  GenerateResult last;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    last = Once(s, store, prompt, absl::GetFlag(FLAGS_layerwise));
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

// A session whose prompt's pages are stored in the daemon(s), and the
// recompute baseline measured while computing them.
struct Prepared {
  std::unique_ptr<DecoderSession> s;
  std::unique_ptr<PrefixStore> nvme;
  std::vector<uint32_t> prompt;
  std::vector<kvtier::PageKey> keys;  // the prompt's pages a restore reads
  double recompute_ms = 0;
  size_t recompute_runs = 0;
  uint32_t first = 0;  // first token after the prompt, computed from scratch
};

Prepared Prepare(uint32_t extra_tokens) {
  Prepared p;
  const uint32_t n = absl::GetFlag(FLAGS_prompt_tokens), tpp = absl::GetFlag(FLAGS_tokens_per_page);
  p.s = MakeSession((n + extra_tokens + 4 + tpp - 1) / tpp + 1, absl::GetFlag(FLAGS_endpoint));
  if (const std::string ep = absl::GetFlag(FLAGS_nvme_endpoint); !ep.empty()) {
    kvtier::ClientOptions o{.endpoint = ep, .client_name = "kvtier-decoder-bench",
                            .timeout = std::chrono::milliseconds(120000)};
    p.nvme = Check(PrefixStore::Connect(o, &p.s->cache(), ModelFingerprint(p.s->weights())));
  }
  p.prompt = BenchPrompt(n);
  // Recompute: the full prefill, exactly what Generate does without a store.
  std::vector<double> recompute;
  for (uint32_t r = 0; r < std::max(1u, absl::GetFlag(FLAGS_recompute_repeats)); ++r) {
    SeqId seq = p.s->cache().AddSequence();
    std::vector<float> logits;
    auto t0 = Clock::now();
    if (auto st = p.s->model().Forward({{seq, p.prompt}}, &logits); !st.ok()) Die(st);
    p.first = Argmax(logits);
    recompute.push_back(Ms(t0));
    if (r == 0) {  // store the computed pages in both daemons
      Check(p.s->store()->Publish(seq, p.prompt));
      if (p.nvme) Check(p.nvme->Publish(seq, p.prompt));
    }
    (void)p.s->cache().RemoveSequence(seq);
  }
  p.recompute_ms = Median(recompute);
  p.recompute_runs = recompute.size();
  p.keys = kvtier::DeriveChain(p.s->cache().layout().Id(), tpp,
                               absl::MakeConstSpan(p.prompt).first((n - 1) / tpp * tpp),
                               ModelFingerprint(p.s->weights()));
  return p;
}

void TtftBench(Prepared& p) {
  const double rc = p.recompute_ms;
  const char* how = absl::GetFlag(FLAGS_layerwise) ? "layer-wise" : "whole-page";
  absl::PrintF("ttft: %zu-token prompt (%s restore)\n  recompute            %9.1f ms (%zu run(s))\n",
               p.prompt.size(), how, rc, p.recompute_runs);
  Warm host = Restored(*p.s, p.s->store(), p.prompt);
  absl::PrintF("  restored from host   %9.1f ms (GET %.1f ms; median of %u) -> %.0fx; %s; same first token: %s\n",
               host.ttft_ms, host.restore_ms, absl::GetFlag(FLAGS_repeats), rc / host.ttft_ms,
               Tiers(host.last.stats), host.last.tokens[0] == p.first ? "yes" : "NO");
  if (!p.nvme) return;
  WaitForTier(*p.nvme, p.keys, kvtier::TierKind::kNvme, p.keys.size() - 2);
  Warm nv = Restored(*p.s, p.nvme.get(), p.prompt);
  absl::PrintF("  restored from NVMe   %9.1f ms (GET %.1f ms; median of %u) -> %.0fx; %s; same first token: %s\n",
               nv.ttft_ms, nv.restore_ms, absl::GetFlag(FLAGS_repeats), rc / nv.ttft_ms, Tiers(nv.last.stats),
               nv.last.tokens[0] == p.first ? "yes" : "NO");
  absl::PrintF("  same 4 tokens host vs NVMe restore: %s\n", host.last.tokens == nv.last.tokens ? "yes" : "NO");
}

// Whole-page vs layer-wise restore of `prompt` from one daemon, alternating
// (and alternating which goes first) so drift hits both alike.
void CompareRestores(const char* where, Prepared& p, PrefixStore* store,
                     const std::vector<uint32_t>& prompt) {
  std::vector<double> ttft[2], get[2], wait;
  GenerateResult last[2];
  bool same = true;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    for (int k = 0; k < 2; ++k) {
      const int lw = (k + int(r)) % 2;
      last[lw] = Once(*p.s, store, prompt, lw == 1);
      ttft[lw].push_back(last[lw].stats.ttft_ms);
      get[lw].push_back(last[lw].stats.restore_ms);
      if (lw == 1) wait.push_back(last[1].stats.layer_wait_ms);
    }
    same = same && last[0].tokens == last[1].tokens &&
           last[0].stats.restored_tokens == last[1].stats.restored_tokens;
  }
  const double w = Median(ttft[0]), l = Median(ttft[1]);
  absl::PrintF("  %-4s whole-page  TTFT %8.1f ms  (GET %.1f ms, then prefill %.1f ms)\n", where, w,
               Median(get[0]), w - Median(get[0]));
  absl::PrintF("  %-4s layer-wise  TTFT %8.1f ms  (GET %.1f ms; prefill blocked on layers %.1f ms) "
               "-> %.2fx; %s\n", where, l, Median(get[1]), Median(wait), w / l, Tiers(last[1].stats));
  absl::PrintF("  %-4s same tokens and restore count both ways: %s (medians of %u)\n", where,
               same ? "yes" : "NO", absl::GetFlag(FLAGS_repeats));
}

// Layer-wise vs whole-page TTFT, from host RAM and from NVMe. The prompt is
// the stored one plus --suffix_tokens new tokens (0: the stored prompt, whose
// last token alone is computed).
void LayerwiseBench(Prepared& p) {
  const uint32_t extra = absl::GetFlag(FLAGS_suffix_tokens);
  std::vector<uint32_t> prompt = BenchPrompt(uint32_t(p.prompt.size()) + extra);
  absl::PrintF("layerwise: %zu-token prompt whose first %zu tokens were stored as pages\n",
               prompt.size(), p.prompt.size());
  CompareRestores("host", p, p.s->store(), prompt);
  if (!p.nvme) return;
  WaitForTier(*p.nvme, p.keys, kvtier::TierKind::kNvme, p.keys.size() - 2);
  CompareRestores("NVMe", p, p.nvme.get(), prompt);
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "the decoder's benchmarks (docs/BENCHMARKS.md): decode (cached vs recomputing every "
      "step), ttft (8k-token prompt recomputed vs restored from the host tier via --endpoint "
      "and from NVMe via --nvme_endpoint), layerwise (whole-page vs layer-wise GET); "
      "scripts/bench_decoder.sh starts the daemons.\n"
      "  kvtier-decoder-bench --mode=decode|ttft|layerwise|all [--endpoint=... --nvme_endpoint=...]");
  setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows when piped to a log
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "decode" || mode == "all") DecodeBench();
  const bool ttft = mode == "ttft" || mode == "all", layerwise = mode == "layerwise" || mode == "all";
  if (ttft || layerwise) {
    if (absl::GetFlag(FLAGS_endpoint).empty())
      Die(absl::InvalidArgumentError(absl::StrCat("--mode=", mode, " needs --endpoint")));
    Prepared p = Prepare(absl::GetFlag(FLAGS_suffix_tokens));
    if (ttft) TtftBench(p);
    if (layerwise) LayerwiseBench(p);
  }
  return 0;
}
