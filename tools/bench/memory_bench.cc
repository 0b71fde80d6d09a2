// `memory`: the daemon's own memory per indexed page. RssAnon (which leaves
// out the shm arenas that hold page bytes) before and after PUTting many small
// pages, divided by the pages the index gained. Meant for a fresh daemon.
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {

absl::StatusOr<nlohmann::json> RunMemory(const BenchOptions& o) {
  const uint64_t pb = 1024;
  const size_t chain = o.memory_chain;
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.memory_endpoint, pb, chain * pb, "kvtier-bench/memory"));
  const uint64_t seed = RunNonce() ^ 0x3e3e3e;
  // One chain first, so per-session and first-request allocations (buffers,
  // thread caches, the namespace's lists) are in the "before" figure.
  std::vector<PageKey> keys = SyntheticChain(rig.layout, seed, chain);
  rig.Fill(keys);
  RETURN_IF_ERROR(rig.PutAll(keys, chain));
  ASSIGN_OR_RETURN(wire::StatsReply before, WireStats(*rig.client));

  const size_t chains = (o.memory_pages + chain - 1) / chain;
  auto t0 = Clock::now();
  for (size_t c = 1; c <= chains; ++c) {
    keys = SyntheticChain(rig.layout, seed + c, chain);
    rig.Fill(keys);
    RETURN_IF_ERROR(rig.PutAll(keys, chain));
  }
  const double put_s = Seconds(t0, Clock::now());
  ASSIGN_OR_RETURN(wire::StatsReply after, WireStats(*rig.client));
  // The last chain must still be there and intact.
  std::memset(rig.shm->data(), 0, rig.shm->size());
  RETURN_IF_ERROR(rig.GetAll(keys, chain));
  if (size_t bad = rig.CountBad(keys); bad > 0)
    return absl::DataLossError(absl::StrCat(bad, " pages wrong in the memory run"));

  const auto& b = before.daemon();
  const auto& a = after.daemon();
  const int64_t pages = int64_t(a.index_pages()) - int64_t(b.index_pages());
  const int64_t anon = int64_t(a.rss_anon_bytes()) - int64_t(b.rss_anon_bytes());
  const int64_t rss = int64_t(a.rss_bytes()) - int64_t(b.rss_bytes());
  if (pages <= 0) return absl::InternalError("the index did not grow");
  const double per_page = double(anon) / pages;
  std::printf("memory: %lld pages of 1 KiB indexed (%zu PUTs of %zu, %.2f s); RssAnon %+.1f MiB "
              "= %.1f bytes/page (total RSS incl. arena %+.1f MiB); index now %llu pages\n",
              (long long)pages, chains, chain, put_s, anon / 1048576.0, per_page, rss / 1048576.0,
              (unsigned long long)a.index_pages());
  std::fflush(stdout);
  return nlohmann::json{{"page_bytes", pb},
                        {"pages_indexed", pages},
                        {"pages_per_put", chain},
                        {"put_seconds", put_s},
                        {"rss_anon_before", b.rss_anon_bytes()},
                        {"rss_anon_after", a.rss_anon_bytes()},
                        {"rss_before", b.rss_bytes()},
                        {"rss_after", a.rss_bytes()},
                        {"index_pages_after", a.index_pages()},
                        {"rss_anon_bytes_per_page", per_page}};
}

}  // namespace kvtier::bench
