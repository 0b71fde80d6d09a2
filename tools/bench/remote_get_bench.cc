// `remote_get` (remote_get_bench.h). The writer daemon PUTs one chain and
// EVICTs it out of host and NVMe, which publishes it to the shared cache;
// the reader daemon's LOOKUP finds the records, then each repeat drops the
// reader's local copies and times its GET of every page into a registered
// buffer (per batch size: each GET fetches, opens and stores its pages),
// checks by STATS that each page was fetched from the cluster, and times the
// raw client's GET of the same (sealed) records. Bytes are checked after the
// timed loop: kvtierd's against the pages, the raw client's record sizes.
#include "bench/remote_get_bench.h"

#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/raw_cluster.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

absl::StatusOr<uint64_t> RemoteHits(Client& c) {
  ASSIGN_OR_RETURN(wire::StatsReply st, WireStats(c));
  if (st.has_shared_cache()) return st.shared_cache().fetch_hits();
  return absl::FailedPreconditionError(
      "the daemon has no shared cache (--remote_seeds), or the session is not an admin");
}

// Leading keys LOOKUP reports on the shared cache.
absl::StatusOr<size_t> OnRemote(Client& c, absl::Span<const PageKey> keys) {
  ASSIGN_OR_RETURN(LookupResult l, c.Lookup(keys));
  size_t n = 0;
  while (n < l.hits && l.tiers[n] == TierKind::kRemote) ++n;
  return n;
}

// PUTs the chain on the writer and pushes it down into the cluster.
absl::Status StoreRemotely(const BenchOptions& o, const RemoteGetOptions& r,
                           const std::vector<PageKey>& keys) {
  ASSIGN_OR_RETURN(Rig w,
                   Rig::Create(o, r.writer_endpoint, r.page_bytes, keys.size() * r.page_bytes,
                               "kvtier-bench/remote_get writer"));
  w.Fill(keys);
  RETURN_IF_ERROR(w.PutAll(keys, keys.size()));
  RETURN_IF_ERROR(w.client->Evict("", TierKind::kHost, 0).status());
  for (int i = 0; i < 300; ++i) {  // the NVMe tier may still be writing them
    RETURN_IF_ERROR(w.client->Evict("", TierKind::kNvme, 0).status());
    RETURN_IF_ERROR(w.client->Evict("", TierKind::kHost, 0).status());
    ASSIGN_OR_RETURN(size_t n, OnRemote(*w.client, keys));
    if (n == keys.size()) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("the writer's pages did not reach the shared cache in 30 s");
}

struct Series {
  std::vector<double> kvtier, raw;
  bool all_remote = true;  // every timed GET read every page from the shared cache
};

// One timed kvtier GET of every page; checks the STATS hit count around it.
absl::StatusOr<double> KvtierRepeat(Rig& rig, const std::vector<PageKey>& keys, size_t batch,
                                    bool* all_remote) {
  // A GET stores what it fetches: drop the reader's copies, so every
  // repeat fetches from the cluster again.
  RETURN_IF_ERROR(rig.client->Evict("", TierKind::kNone, 0).status());
  ASSIGN_OR_RETURN(uint64_t before, RemoteHits(*rig.client));
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(rig.GetAll(keys, batch));
  const double s = Seconds(t0, Clock::now());
  ASSIGN_OR_RETURN(uint64_t after, RemoteHits(*rig.client));
  *all_remote &= after - before == keys.size();
  return keys.size() * rig.page_bytes / s / 1e9;
}

absl::StatusOr<double> RawRepeat(RawCluster& raw, const std::vector<std::string>& names,
                                 size_t batch, uint64_t skip, Rig& rig,
                                 const std::vector<uint8_t*>& dst) {
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(raw.GetInto(names, batch, skip, rig.page_bytes, dst));
  return names.size() * rig.page_bytes / Seconds(t0, Clock::now()) / 1e9;
}

absl::Status CheckBytes(Rig& rig, const std::vector<PageKey>& keys, const char* who,
                        const std::function<absl::Status()>& get) {
  std::memset(rig.shm->data(), 0, rig.shm->size());
  RETURN_IF_ERROR(get());
  if (size_t bad = rig.CountBad(keys); bad > 0)
    return absl::DataLossError(absl::StrCat(bad, " of ", keys.size(), " pages wrong from ", who));
  return absl::OkStatus();
}

nlohmann::json Report(const RemoteGetOptions& r, size_t batch, const Series& s) {
  const Summary k = Summarize(s.kvtier), w = Summarize(s.raw);
  std::printf(
      "  %3zu pages/GET: kvtierd %6.3f GB/s [%.3f..%.3f]  raw hiredis %6.3f GB/s "
      "[%.3f..%.3f]  kvtierd/raw %.2f  (remote-tier hits every repeat: %s)\n",
      batch, k.median, k.min, k.max, w.median, w.min, w.max, k.median / w.median,
      s.all_remote ? "yes" : "NO");
  return {{"batch_pages", batch},
          {"kvtier_gbps", ToJson(k)},
          {"raw_gbps", ToJson(w)},
          {"ratio", k.median / w.median},
          {"all_remote_hits", s.all_remote},
          {"batch_bytes", batch * r.page_bytes}};
}

// What the timed loop reads: the reader's session and buffer, the chain,
// and the raw client with the records' names.
struct Setup {
  Rig rig;
  std::vector<PageKey> keys;
  std::vector<std::string> names;
  std::unique_ptr<RawCluster> raw;
  uint64_t skip = 0;  // record header bytes before the page
  std::vector<uint8_t*> dst;
};

absl::StatusOr<Setup> Prepare(const BenchOptions& o, const RemoteGetOptions& r) {
  Setup x;
  ASSIGN_OR_RETURN(x.rig, Rig::Create(o, o.endpoint, r.page_bytes, r.pages * r.page_bytes,
                                      "kvtier-bench/remote_get reader"));
  x.keys = SyntheticChain(x.rig.layout, RunNonce() ^ 0x7e3073, r.pages);
  RETURN_IF_ERROR(StoreRemotely(o, r, x.keys));
  const std::string ns = x.rig.client->namespace_name();
  for (const PageKey& k : x.keys) x.names.push_back(DocumentedRecordKey(ns, k));
  ASSIGN_OR_RETURN(x.raw, RawCluster::Connect(r.seeds));
  ASSIGN_OR_RETURN(size_t missing, x.raw->CountMissing(x.names));
  if (missing > 0)
    return absl::NotFoundError(absl::StrCat(missing, " of ", x.names.size(),
                                            " records are not where "
                                            "the documented key rule says (",
                                            x.names[0], ")"));
  ASSIGN_OR_RETURN(size_t adopted,
                   OnRemote(*x.rig.client, x.keys));  // the reader's LOOKUP finds them
  if (adopted != x.keys.size())
    return absl::NotFoundError(absl::StrCat("the reader's LOOKUP found ", adopted, " of ",
                                            x.keys.size(), " pages on the shared cache"));
  x.skip = DocumentedHeaderBytes(ns);
  for (size_t i = 0; i < x.keys.size(); ++i) x.dst.push_back(x.rig.page(i));
  return x;
}

// Per repeat and batch size, kvtierd and raw alternating which goes first,
// so drift hits both alike.
absl::StatusOr<std::vector<Series>> Measure(const BenchOptions& o, const RemoteGetOptions& r,
                                            Setup& x) {
  std::vector<Series> series(r.batches.size());
  bool warm = true;  // warm-up pass, untimed
  RETURN_IF_ERROR(KvtierRepeat(x.rig, x.keys, x.keys.size(), &warm).status());
  RETURN_IF_ERROR(RawRepeat(*x.raw, x.names, x.names.size(), x.skip, x.rig, x.dst).status());
  for (int rep = 0; rep < o.repeats; ++rep)
    for (size_t b = 0; b < r.batches.size(); ++b)
      for (int k = 0; k < 2; ++k) {
        Series& s = series[b];
        if ((k + rep) % 2 == 0) {
          ASSIGN_OR_RETURN(double g, KvtierRepeat(x.rig, x.keys, r.batches[b], &s.all_remote));
          s.kvtier.push_back(g);
        } else {
          ASSIGN_OR_RETURN(double g,
                           RawRepeat(*x.raw, x.names, r.batches[b], x.skip, x.rig, x.dst));
          s.raw.push_back(g);
        }
      }
  RETURN_IF_ERROR(
      CheckBytes(x.rig, x.keys, "kvtierd", [&] { return x.rig.GetAll(x.keys, x.keys.size()); }));
  // The raw client reads the sealed records: the same bytes on the wire,
  // ciphertext in the buffer (it has no key to open them).
  RETURN_IF_ERROR(x.raw->GetInto(x.names, x.names.size(), x.skip, x.rig.page_bytes, x.dst));
  return series;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunRemoteGet(const BenchOptions& o, const RemoteGetOptions& r) {
  if (r.writer_endpoint.empty() || r.seeds.empty() || o.endpoint.empty())
    return absl::InvalidArgumentError(
        "remote_get needs --endpoint, --writer_endpoint and --remote_seeds");
  ASSIGN_OR_RETURN(Setup x, Prepare(o, r));
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // as `redis`: reply memory stays in the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ASSIGN_OR_RETURN(std::vector<Series> series, Measure(o, r, x));
  std::printf(
      "remote_get: %zu x %s pages in the shared cache (%zu masters), median of %d, "
      "bytes verified both ways; key %s\n",
      x.keys.size(), HumanBytes(r.page_bytes).c_str(), x.raw->masters(), o.repeats,
      x.names[0].c_str());
  nlohmann::json j = {{"pages", x.keys.size()}, {"page_bytes", r.page_bytes},
                      {"repeats", o.repeats},   {"masters", x.raw->masters()},
                      {"bytes_verified", true}, {"batches", nlohmann::json::array()}};
  for (size_t b = 0; b < r.batches.size(); ++b)
    j["batches"].push_back(Report(r, r.batches[b], series[b]));
  std::fflush(stdout);
  return j;
}

}  // namespace kvtier::bench
