// kvtier-remote-ttft-bench: cross-host prefix reuse through the shared cache
// (issue 15). A prompt is computed on node A (--writer_endpoint), its pages
// are pushed down A's tiers into the shared Redis Cluster (EVICT host, then
// NVMe); node B (--endpoint: another kvtierd on the same cluster, with
// --promote_on_get=false so every repeat reads the cluster) restores them.
// TTFT restored on B vs recomputed without a cache, alternating, medians;
// each restore is checked to have read every page from B's shared cache
// (LOOKUP/GET tiers and STATS hits), and the generated tokens to match.
// scripts/bench_remote.sh starts the cluster and both daemons.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench_util.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/generator.h"
#include "kvtier/decoder/prefix_store.h"
#include "kvtier/decoder/session.h"

ABSL_FLAG(std::string, size, "124m", "random weights of this named size");
ABSL_FLAG(std::string, model, "", "or a checkpoint directory");
ABSL_FLAG(uint32_t, prompt_tokens, 4096, "prompt length");
ABSL_FLAG(uint32_t, new_tokens, 4, "tokens generated per run (compared between runs)");
ABSL_FLAG(uint32_t, repeats, 5, "repeats of each measurement (median reported)");
ABSL_FLAG(uint32_t, tokens_per_page, 256, "tokens per KV page");
ABSL_FLAG(std::string, kv_dtype, "fp16", "KV page dtype");
ABSL_FLAG(std::string, writer_endpoint, "",
          "node A: computes the prompt, pushes it into the cluster");
ABSL_FLAG(std::string, endpoint, "", "node B: restores from the shared cache");

namespace {

using namespace kvtier::decoder;  // NOLINT: a benchmark main
using bench::Check;
using bench::Die;
using bench::Median;


std::vector<uint32_t> BenchPrompt(uint32_t n) {  // as kvtier-decoder-bench's
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 2654435761u + 11) % 256;
  return t;
}

kvtier::ClientOptions Options(const std::string& endpoint) {
  return {.endpoint = endpoint,
          .client_name = "kvtier-remote-ttft-bench",
          .timeout = std::chrono::milliseconds(120000)};
}

uint64_t RemoteHits(kvtier::Client& c) {
  const kvtier::wire::StatsReply st = Check(WireStats(c));
  if (st.has_shared_cache()) return st.shared_cache().fetch_hits();
  Die(absl::FailedPreconditionError("the daemon has no shared cache (--remote_seeds)"));
}

size_t CountTier(const std::vector<kvtier::TierKind>& v, kvtier::TierKind t) {
  return size_t(std::count(v.begin(), v.end(), t));
}

// EVICTs A's pages out of host, then out of NVMe (into the cluster), until
// LOOKUP on A reports every page of the chain on the shared cache.
void PushIntoCluster(kvtier::Client& a, const std::vector<kvtier::PageKey>& keys) {
  Check(a.Evict("", kvtier::TierKind::kHost, 0));
  for (int i = 0; i < 300; ++i) {
    Check(a.Evict("", kvtier::TierKind::kNvme, 0));
    Check(a.Evict("", kvtier::TierKind::kHost, 0));
    auto l = Check(a.Lookup(keys));
    if (l.hits == keys.size() && CountTier(l.tiers, kvtier::TierKind::kRemote) == keys.size())
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Die(absl::DeadlineExceededError("A's pages did not reach the shared cache in 30 s"));
}

GenerateResult Run(DecoderSession& s, PrefixStore* store, const std::vector<uint32_t>& prompt) {
  Generator g(&s.model(), store);
  return Check(g.Generate(
      prompt, {.max_new_tokens = absl::GetFlag(FLAGS_new_tokens), .stop_at_eos = false}));
}

struct Samples {
  std::vector<double> restore_ttft, restore_get, recompute_ttft;
  bool all_remote = true, same_tokens = true;
};

// One restore on B: checked to have read every page from B's shared cache.
void RestoreOnce(DecoderSession& s, PrefixStore& b, const std::vector<uint32_t>& prompt,
                 size_t pages, const std::vector<uint32_t>& want, Samples& out) {
  // B stores what it fetches: drop its copies so each restore fetches again.
  Check(b.client().Evict("", kvtier::TierKind::kNone, 0));
  const uint64_t before = RemoteHits(b.client());
  GenerateResult r = Run(s, &b, prompt);
  const uint64_t hits = RemoteHits(b.client()) - before;
  const size_t remote = CountTier(r.stats.restored_from, kvtier::TierKind::kRemote);
  out.all_remote &= remote == pages && r.stats.restored_from.size() == pages && hits == pages;
  out.same_tokens &= r.tokens == want;
  out.restore_ttft.push_back(r.stats.ttft_ms);
  out.restore_get.push_back(r.stats.restore_ms);
  absl::PrintF(
      "  restore on B: TTFT %8.1f ms (LOOKUP+GET %.1f ms), %u tokens restored, %zu/%zu "
      "pages from remote, remote hits +%u\n",
      r.stats.ttft_ms, r.stats.restore_ms, r.stats.restored_tokens, remote, pages, unsigned(hits));
}

void RecomputeOnce(DecoderSession& s, const std::vector<uint32_t>& prompt,
                   const std::vector<uint32_t>& want, Samples& out) {
  GenerateResult r = Run(s, nullptr, prompt);
  out.same_tokens &= r.tokens == want;
  out.recompute_ttft.push_back(r.stats.ttft_ms);
  absl::PrintF("  recompute:    TTFT %8.1f ms\n", r.stats.ttft_ms);
}

std::unique_ptr<DecoderSession> MakeSession(uint32_t n, uint32_t tpp) {
  SessionOptions o;
  o.checkpoint_dir = absl::GetFlag(FLAGS_model);
  o.size = absl::GetFlag(FLAGS_size);
  o.tokens_per_page = tpp;
  o.kv_dtype = Check(kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
  o.kv_pages = (n + absl::GetFlag(FLAGS_new_tokens) + tpp - 1) / tpp + 1;
  o.client = Options(absl::GetFlag(FLAGS_writer_endpoint));  // node A
  auto s = Check(DecoderSession::Create(o));
  if (s->store() == nullptr) Die(absl::UnavailableError(s->daemon_note()));
  const ModelConfig& c = s->weights().config;
  absl::PrintF(
      "model %s: %u layers x %u hidden, %u KV heads, %.1fM parameters; page %s = %.2f MiB\n",
      o.size, c.num_hidden_layers, c.hidden_size, c.num_key_value_heads,
      s->weights().ParameterCount() / 1e6, s->cache().layout().DebugString(),
      s->cache().layout().PageBytes() / 1048576.0);
  return s;
}

void PrintReport(const Samples& x, uint32_t n, size_t pages, double page_mib) {
  const double rs = Median(x.restore_ttft), rc = Median(x.recompute_ttft);
  absl::PrintF(
      "remote ttft: %u-token prompt, %zu pages of %.2f MiB restored from the shared cache on B\n", n,
      pages, page_mib);
  absl::PrintF("  recompute            %9.1f ms (median of %zu)\n", rc, x.recompute_ttft.size());
  absl::PrintF("  restored on B        %9.1f ms (LOOKUP+GET %.1f ms; median of %zu)\n", rs,
               Median(x.restore_get), x.restore_ttft.size());
  absl::PrintF("  recompute/restore    %9.1fx (target >= 10)\n", rc / rs);
  absl::PrintF("  every restore read every page from B's shared cache: %s\n",
               x.all_remote ? "yes" : "NO");
  absl::PrintF("  same %u tokens as A in every run: %s\n", absl::GetFlag(FLAGS_new_tokens),
               x.same_tokens ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "cross-host prefix reuse through the shared cache: a prompt computed on node A "
      "(--writer_endpoint) is pushed into the shared cluster and restored on node B "
      "(--endpoint, --promote_on_get=false); TTFT restored vs recomputed, same tokens. "
      "scripts/bench_remote.sh starts the cluster and the daemons.\n"
      "  kvtier-remote-ttft-bench --writer_endpoint=ipc://A --endpoint=ipc://B "
      "[--prompt_tokens=4096]");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (absl::GetFlag(FLAGS_writer_endpoint).empty() || absl::GetFlag(FLAGS_endpoint).empty())
    Die(absl::InvalidArgumentError("needs --writer_endpoint and --endpoint"));
  const uint32_t n = absl::GetFlag(FLAGS_prompt_tokens), tpp = absl::GetFlag(FLAGS_tokens_per_page);
  auto s = MakeSession(n, tpp);
  const std::vector<uint32_t> prompt = BenchPrompt(n);
  // On A: compute (nothing stored yet) and publish; A's tokens are the reference.
  GenerateResult on_a = Run(*s, s->store(), prompt);
  absl::PrintF("A: computed %u tokens (TTFT %.1f ms), published %u pages\n",
               on_a.stats.computed_tokens, on_a.stats.ttft_ms, on_a.stats.pages_put);
  const auto keys =
      kvtier::DeriveChain(s->cache().layout().Id(), tpp,
                          absl::MakeConstSpan(prompt).first(n / tpp * tpp), s->fingerprint());
  PushIntoCluster(s->store()->client(), keys);
  auto b = Check(
      PrefixStore::Connect(Options(absl::GetFlag(FLAGS_endpoint)), &s->cache(), s->fingerprint()));
  Samples x;
  for (uint32_t r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {  // alternating, so drift hits both
    if (r % 2 == 0) RestoreOnce(*s, *b, prompt, keys.size(), on_a.tokens, x);
    RecomputeOnce(*s, prompt, on_a.tokens, x);
    if (r % 2 == 1) RestoreOnce(*s, *b, prompt, keys.size(), on_a.tokens, x);
  }
  PrintReport(x, n, keys.size(), s->cache().layout().PageBytes() / 1048576.0);
  return x.all_remote && x.same_tokens ? 0 : 1;
}
