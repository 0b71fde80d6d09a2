// kvtier-first-restore-bench: the demo's restore in a fresh process against a
// warm GET of the same pages, in one run (issue 28, "the first touch").
// The parent serves the demo's prompt once (124m random weights, a 2,048-token
// prompt, fp16 pages of 256 tokens: kvtier-generate's run 1), so the daemon
// holds its pages; then, per repeat, it starts itself again as a fresh
// process, which does what kvtier-generate's run 2 does before its forward
// pass: creates and clears the KV arena, connects and registers it, LOOKUPs
// and GETs the prompt's pages (the first restore). Then, once the daemon's
// warm-up of the arena is over, it GETs the same pages into the same places
// again (a warm GET) and reports every stage with its minor page faults.
// scripts/bench_first_touch.sh starts the daemon.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_util.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/config.h"
#include "kvtier/decoder/model.h"
#include "kvtier/decoder/session.h"
#include "kvtier/status_macros.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"

ABSL_FLAG(std::string, endpoint, "", "kvtierd endpoint (default: the default ipc socket)");
ABSL_FLAG(std::string, size, "124m", "random weights of this named size (as kvtier-generate --size)");
ABSL_FLAG(uint32_t, prompt_tokens, 2048, "prompt length (kvtier-generate --random_prompt_tokens)");
ABSL_FLAG(uint64_t, prompt_seed, 7, "seed of the prompt (kvtier-generate --prompt_seed)");
ABSL_FLAG(uint32_t, max_new_tokens, 8, "new tokens of the storing run (sizes the arena as kvtier-generate does)");
ABSL_FLAG(uint32_t, tokens_per_page, 256, "tokens per KV page");
ABSL_FLAG(std::string, kv_dtype, "fp16", "KV page dtype");
ABSL_FLAG(uint32_t, repeats, 7, "fresh processes, each one first restore (medians reported)");
ABSL_FLAG(uint32_t, warm_gets, 3, "warm GETs per fresh process (its median is that process's figure)");
ABSL_FLAG(double, max_warm_wait_s, 10, "longest a process waits for the daemon's warm-up of its arena");
ABSL_FLAG(
    std::string, arena_hugepages, "auto",
    "the fresh process's arena pages: auto (2 MiB hugetlb pages when free, as kvtier-generate), "
    "on (hugetlb or fail), off (4 KiB shm pages)");
ABSL_FLAG(std::string, child, "",
          "internal: run as the fresh process, with the model fingerprint (hex) and arena pages");

namespace {

using namespace kvtier::decoder;  // NOLINT: a benchmark main
using bench::Check;
using bench::Die;
using bench::Median;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

long MinorFaults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// kvtier-generate --random_prompt_tokens=N --prompt_seed=S, token for token.
std::vector<uint32_t> DemoPrompt() {
  std::mt19937 rng(uint32_t(absl::GetFlag(FLAGS_prompt_seed)));
  std::vector<uint32_t> ids(absl::GetFlag(FLAGS_prompt_tokens));
  for (uint32_t& t : ids) t = rng() % 256;
  return ids;
}

kvtier::ClientOptions Options() {
  kvtier::ClientOptions o;
  o.endpoint = absl::GetFlag(FLAGS_endpoint);
  o.client_name = "kvtier-first-restore-bench";
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

// One process's figures (ms, and minor faults of this process).
struct Figures {
  double arena_ms = 0, register_ms = 0, restore_ms = 0, warm_wait_ms = 0, warm_ms = 0;
  long arena_faults = 0, restore_faults = 0;
  uint32_t restored = 0;
  int huge = 0;  // the arena is hugetlb pages
};

absl::StatusOr<uint64_t> PendingWarmup(kvtier::Client& c) {
  ASSIGN_OR_RETURN(kvtier::wire::StatsReply st, kvtier::WireStats(c));
  for (const auto& n : st.namespaces())
    if (n.name() == c.namespace_name()) return n.warmup().pending_bytes();
  return uint64_t{0};
}

// The fresh process: kvtier-generate's run 2 up to its forward pass, then
// warm GETs of the same pages.
absl::StatusOr<Figures> Child(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  uint32_t pages = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &pages))
    return absl::InvalidArgumentError("--child=FINGERPRINT,PAGES");
  ASSIGN_OR_RETURN(kvtier::PageKey root, kvtier::PageKey::FromHex(parts[0]));
  ASSIGN_OR_RETURN(ModelConfig config, NamedConfig(absl::GetFlag(FLAGS_size)));
  ASSIGN_OR_RETURN(kvtier::Dtype dtype, kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
  const uint32_t tpp = absl::GetFlag(FLAGS_tokens_per_page);
  const std::vector<uint32_t> prompt = DemoPrompt();
  Figures f;
  // The arena, created and cleared as DecoderSession does (PagedKvCache::Create).
  long faults = MinorFaults();
  auto t = Clock::now();
  KvCacheOptions arena{KvLayoutFor(config, tpp, dtype), pages, 0};
  ASSIGN_OR_RETURN(arena.huge_pages, kvtier::ParseHugePages(absl::GetFlag(FLAGS_arena_hugepages)));
  ASSIGN_OR_RETURN(auto cache, PagedKvCache::Create(arena));
  f.huge = cache->arena().huge_pages();
  f.arena_ms = MsSince(t);
  f.arena_faults = MinorFaults() - faults;
  // HELLO + REGISTER_BUFFER (DecoderSession::Connect).
  t = Clock::now();
  ASSIGN_OR_RETURN(auto store, PrefixStore::Connect(Options(), cache.get(), root));
  f.register_ms = MsSince(t);
  // LOOKUP + GET (Generator::Prefill's restore).
  const SeqId seq = cache->AddSequence();
  faults = MinorFaults();
  t = Clock::now();
  ASSIGN_OR_RETURN(RestoreResult r, store->Restore(seq, prompt));
  f.restore_ms = MsSince(t);
  f.restore_faults = MinorFaults() - faults;
  f.restored = r.tokens;
  if (r.tiers.empty()) return absl::NotFoundError("the fresh process restored nothing");
  // The same pages into the same places, once the daemon's mapping is warm.
  std::vector<kvtier::PageKey> keys = kvtier::DeriveChain(
      cache->layout().Id(), tpp, absl::MakeConstSpan(prompt).first(r.tiers.size() * tpp), root);
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < keys.size(); ++i) offsets.push_back(cache->PageOffset(cache->BlockTable(seq)[i]));
  t = Clock::now();
  while (true) {
    ASSIGN_OR_RETURN(uint64_t pending, PendingWarmup(store->client()));
    if (pending == 0) break;
    if (MsSince(t) > absl::GetFlag(FLAGS_max_warm_wait_s) * 1e3) {
      f.warm_wait_ms = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (f.warm_wait_ms == 0) f.warm_wait_ms = MsSince(t);
  std::vector<double> warm;
  for (uint32_t i = 0; i < std::max(1u, absl::GetFlag(FLAGS_warm_gets)); ++i) {
    t = Clock::now();
    ASSIGN_OR_RETURN(auto tiers, store->client().Get(keys, store->buffer(), offsets));
    warm.push_back(MsSince(t));
    for (kvtier::TierKind k : tiers)
      if (k == kvtier::TierKind::kNone) return absl::NotFoundError("a page went missing between GETs");
  }
  f.warm_ms = Median(warm);
  return f;
}

constexpr char kChildLine[] = "first-restore-child";

Figures RunChild(const std::string& spec) {
  std::string cmd = absl::StrCat("/proc/", getpid(), "/exe --child=", spec);
  for (const char* flag : {"endpoint", "size", "prompt_tokens", "prompt_seed", "tokens_per_page",
                           "kv_dtype", "warm_gets", "max_warm_wait_s", "arena_hugepages"}) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag);
    absl::StrAppend(&cmd, " '--", flag, "=", f->CurrentValue(), "'");
  }
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) Die(absl::InternalError("popen failed"));
  Figures f;
  char line[512];
  bool got = false;
  while (fgets(line, sizeof(line), p) != nullptr) {
    got =
        got || std::sscanf(line, "first-restore-child %lf %lf %lf %lf %lf %ld %ld %u %d",
                           &f.arena_ms, &f.register_ms, &f.restore_ms, &f.warm_wait_ms, &f.warm_ms,
                           &f.arena_faults, &f.restore_faults, &f.restored, &f.huge) == 9;
  }
  if (pclose(p) != 0 || !got) Die(absl::InternalError("the fresh process failed"));
  return f;
}

// The demo's run 1 in this process: computes the prompt and stores its pages.
std::string StoreDemoPages(uint32_t* arena_pages) {
  SessionOptions o;
  o.size = absl::GetFlag(FLAGS_size);
  o.tokens_per_page = absl::GetFlag(FLAGS_tokens_per_page);
  o.kv_dtype = Check(kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype)));
  const std::vector<uint32_t> prompt = DemoPrompt();
  const uint32_t tpp = o.tokens_per_page, n = absl::GetFlag(FLAGS_max_new_tokens);
  o.kv_pages = uint32_t((prompt.size() + n + tpp - 1) / tpp) + 1;  // as kvtier-generate
  o.client = Options();
  auto s = Check(DecoderSession::Create(o));
  if (s->store() == nullptr) Die(absl::UnavailableError(s->daemon_note()));
  GenerateResult r = Check(s->generator().Generate(prompt, {.max_new_tokens = n}));
  absl::PrintF("stored: %u-token prompt, %u pages put (%u deduplicated), page %s\n", r.stats.prompt_tokens,
               r.stats.pages_put, r.stats.pages_deduplicated, s->cache().layout().DebugString());
  *arena_pages = s->cache().num_pages();
  return ModelFingerprint(s->weights()).ToHex();
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "the demo's restore in a fresh process vs a warm GET of the same pages (issue 28): stores "
      "the demo's prompt (124m, 2,048 tokens) once, then per repeat a fresh process creates its "
      "arena, registers it, restores the prompt and GETs the same pages again once warm; "
      "scripts/bench_first_touch.sh starts the daemon.\n"
      "  kvtier-first-restore-bench --endpoint=ipc://... [--repeats=7]");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (const std::string spec = absl::GetFlag(FLAGS_child); !spec.empty()) {
    Figures f = Check(Child(spec));
    absl::PrintF("%s %.3f %.3f %.3f %.3f %.3f %d %d %u %d\n", kChildLine, f.arena_ms, f.register_ms,
                 f.restore_ms, f.warm_wait_ms, f.warm_ms, f.arena_faults, f.restore_faults,
                 f.restored, f.huge);
    return 0;
  }
  uint32_t pages = 0;
  const std::string root = StoreDemoPages(&pages);
  std::vector<double> arena, reg, restore, first, wait, warm, ratio;
  absl::PrintF("repeat | arena+clear ms (faults) | HELLO+REGISTER ms | restore ms (faults) | "
               "waited for warm-up ms | warm GET ms | (HELLO+REGISTER+restore)/warm\n");
  for (uint32_t i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    Figures f = RunChild(absl::StrCat(root, ",", pages));
    arena.push_back(f.arena_ms);
    reg.push_back(f.register_ms);
    restore.push_back(f.restore_ms);
    first.push_back(f.register_ms + f.restore_ms);
    wait.push_back(f.warm_wait_ms);
    warm.push_back(f.warm_ms);
    ratio.push_back(first.back() / f.warm_ms);
    absl::PrintF("%6u | %9.1f (%6d) | %8.2f | %8.2f (%d) | %8.1f | %7.2f | %5.2f  (restored %u tokens)\n", i,
                 f.arena_ms, f.arena_faults, f.register_ms, f.restore_ms, f.restore_faults, f.warm_wait_ms,
                 f.warm_ms, ratio.back(), f.restored);
    if (i == 0) absl::PrintF("arena pages: %s\n", f.huge ? "2 MiB hugetlb" : "4 KiB shm");
  }
  const double m_first = Median(first), m_warm = Median(warm);
  absl::PrintF("medians of %zu fresh processes: arena+clear %.1f ms, HELLO+REGISTER %.2f ms, "
               "restore (LOOKUP+GET) %.2f ms, first restore (HELLO+REGISTER+LOOKUP+GET) %.2f ms; "
               "warm GET %.2f ms\n",
               first.size(), Median(arena), Median(reg), Median(restore), m_first, m_warm);
  absl::PrintF("first restore / warm GET: %.2f (ratio of medians; per-process median %.2f); "
               "restore alone / warm GET: %.2f; target <= 2\n",
               m_first / m_warm, Median(ratio), Median(restore) / m_warm);
  return 0;
}
