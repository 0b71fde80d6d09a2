// kvtier-demo: the quick-start job. Acts like an inference process: hashes a
// prompt into page keys, LOOKUPs them (cold), PUTs the pages through a
// registered shm buffer, then serves the same prompt again: LOOKUP (warm),
// GET into a fresh part of the buffer, and checks every byte.
#include <chrono>
#include <cstring>
#include <cstdio>
#include <numeric>

#include "absl/flags/flag.h"
#include "common/page_pattern.h"
#include "kvtier/cli.h"
#include "kvtier/client.h"
#include "kvtier/shm_buffer.h"

ABSL_FLAG(std::string, endpoint, "", "daemon endpoint (default: the default ipc socket)");
ABSL_FLAG(std::string, tenant, "default", "tenant");
ABSL_FLAG(std::string, token, "", "token");
ABSL_FLAG(int, prompt_tokens, 8192, "prompt length in tokens");
ABSL_FLAG(int, layers, 16, "model layers");
ABSL_FLAG(int, kv_heads, 8, "KV heads");
ABSL_FLAG(int, head_dim, 64, "head dimension");
ABSL_FLAG(int, tokens_per_page, 256, "tokens per page");

namespace {

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int Die(const absl::Status& st) {
  std::fprintf(stderr, "kvtier-demo: %s\n", std::string(st.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "the quick-start job: acts like an inference process against a running kvtierd — "
      "hashes a prompt into page keys, LOOKUPs them (cold), PUTs the pages through a "
      "registered shm buffer, then serves the prompt again (LOOKUP warm, GET) and checks "
      "every byte.\n"
      "  kvtier-demo [--endpoint=ipc:///path/kvtierd.sock] [--prompt_tokens=N]");
  kvtier::Layout layout{uint32_t(absl::GetFlag(FLAGS_layers)), uint32_t(absl::GetFlag(FLAGS_kv_heads)),
                        uint32_t(absl::GetFlag(FLAGS_head_dim)),
                        uint32_t(absl::GetFlag(FLAGS_tokens_per_page)), kvtier::Dtype::kFp16};
  if (auto st = layout.Validate(); !st.ok()) return Die(st);
  kvtier::ClientOptions opts{.endpoint = absl::GetFlag(FLAGS_endpoint),
                             .tenant = absl::GetFlag(FLAGS_tenant),
                             .token = absl::GetFlag(FLAGS_token),
                             .layout = layout,
                             .client_name = "kvtier-demo"};
  auto client = kvtier::Client::Connect(opts);
  if (!client.ok()) return Die(client.status());
  kvtier::Client& c = **client;

  std::vector<uint32_t> prompt(absl::GetFlag(FLAGS_prompt_tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = uint32_t((i * 2654435761u) % 32000);
  std::vector<kvtier::PageKey> keys = kvtier::DeriveChain(layout.Id(), layout.tokens_per_page, prompt);
  const uint64_t pb = layout.PageBytes();
  std::printf("prompt: %zu tokens -> %zu full pages of %lu KiB (layout %s)\n", prompt.size(),
              keys.size(), (unsigned long)(pb >> 10), layout.DebugString().c_str());

  auto shm = kvtier::ShmBuffer::Create(2 * keys.size() * pb);
  if (!shm.ok()) return Die(shm.status());
  auto buf = c.RegisterBuffer(**shm);
  if (!buf.ok()) return Die(buf.status());
  // An inference engine's KV arena is long since touched; fault it in now so
  // the timings below show copies, not first-touch page faults.
  std::memset((*shm)->data(), 0, (*shm)->size());
  std::vector<uint64_t> put_off(keys.size()), get_off(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    put_off[i] = i * pb;
    get_off[i] = (keys.size() + i) * pb;
    kvtier::tools::FillPattern(keys[i], (*shm)->data() + put_off[i], pb);  // "prefill"
  }

  auto t0 = std::chrono::steady_clock::now();
  auto cold = c.Lookup(keys);
  if (!cold.ok()) return Die(cold.status());
  auto t1 = std::chrono::steady_clock::now();
  auto put = c.Put(keys, kvtier::PageKey::Zero(), *buf, put_off);
  if (!put.ok()) return Die(put.status());
  auto t2 = std::chrono::steady_clock::now();
  std::printf("request 1: LOOKUP %u/%zu hits (%.2f ms); PUT stored %u, deduplicated %u (%.2f ms)\n",
              cold->hits, keys.size(), Ms(t0, t1), put->stored, put->deduplicated, Ms(t1, t2));

  auto t3 = std::chrono::steady_clock::now();
  auto warm = c.Lookup(keys);
  if (!warm.ok()) return Die(warm.status());
  auto got = c.Get(keys, *buf, get_off);
  if (!got.ok()) return Die(got.status());
  auto t4 = std::chrono::steady_clock::now();
  size_t ok = 0, hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) hits += (*got)[i] != kvtier::TierKind::kNone;
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*got)[i] != kvtier::TierKind::kNone &&
        kvtier::tools::CheckPattern(keys[i], (*shm)->data() + get_off[i], pb) == pb)
      ++ok;
  double gib = double(keys.size() * pb) / (1 << 30);
  std::printf("request 2: LOOKUP %u/%zu hits; GET %zu hits, %zu byte-exact, %.2f ms (%.2f GiB/s)\n",
              warm->hits, keys.size(), hits, ok, Ms(t3, t4), gib / (Ms(t3, t4) / 1000));
  if (ok != hits || hits < put->stored) {
    std::fprintf(stderr, "kvtier-demo: %zu of %zu pages came back wrong or missing\n",
                 keys.size() - ok, keys.size());
    return 1;
  }
  if (put->not_stored > 0)
    std::printf("note: %u pages did not fit the host tier (prompt larger than the cache)\n",
                put->not_stored);
  return 0;
}
