// `throughput`: GET and PUT through a registered shm buffer, per page size, in
// batched requests and one page per request, each as a ratio to a plain
// single-thread memcpy of the same bytes measured in the same repeat loop.
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

// Single-thread memcpy of the working set in page-size copies, between two
// warm shm mappings (the same kind of memory kvtier copies between).
double MemcpyGbps(const uint8_t* src, uint8_t* dst, uint64_t bytes, uint64_t page_bytes) {
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < bytes; off += page_bytes) std::memcpy(dst + off, src + off, page_bytes);
  auto t1 = Clock::now();
  return bytes / Seconds(t0, t1) / 1e9;
}

template <typename F>
absl::StatusOr<double> TimedGbps(uint64_t bytes, F&& f) {
  auto t0 = Clock::now();
  RETURN_IF_ERROR(f());
  auto t1 = Clock::now();
  return bytes / Seconds(t0, t1) / 1e9;
}

struct Series {
  std::vector<double> memcpy, get_batch, put_batch, get_one, put_one;
};

// One PUT repeat: fresh keys (so every page is really stored), pattern bytes
// written untimed, the timed PUT, then DELETE so the host tier never fills.
absl::StatusOr<double> PutRepeat(Rig& rig, uint64_t seed, size_t batch, bool verify) {
  std::vector<PageKey> keys = SyntheticChain(rig.layout, seed, rig.pages());
  rig.Fill(keys);
  ASSIGN_OR_RETURN(double gbps, TimedGbps(rig.pages() * rig.page_bytes,
                                          [&] { return rig.PutAll(keys, batch); }));
  if (verify) {  // read back what was stored, into a zeroed buffer
    std::memset(rig.shm->data(), 0, rig.shm->size());
    RETURN_IF_ERROR(rig.GetAll(keys, batch));
    if (size_t bad = rig.CountBad(keys); bad > 0)
      return absl::DataLossError(absl::StrCat(bad, " pages came back wrong after PUT"));
  }
  RETURN_IF_ERROR(rig.DeleteAll(keys));
  return gbps;
}

absl::StatusOr<nlohmann::json> RunOneSize(const BenchOptions& o, uint64_t pb) {
  const uint64_t ws = std::max(o.working_set_bytes, o.batch_bytes) / pb * pb;
  const size_t batch = std::max<uint64_t>(1, o.batch_bytes / pb);
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.endpoint, pb, ws, "kvtier-bench/throughput"));
  ASSIGN_OR_RETURN(auto base_src, ShmBuffer::Create(ws));
  std::memset(base_src->data(), 1, ws);
  const uint64_t seed = RunNonce() ^ (pb * 1000003);

  // The GET working set is stored once; warm-up passes fault in the daemon's
  // mapping of our buffer and its arena slots before anything is timed.
  std::vector<PageKey> get_keys = SyntheticChain(rig.layout, seed, rig.pages());
  rig.Fill(get_keys);
  RETURN_IF_ERROR(rig.PutAll(get_keys, batch));
  RETURN_IF_ERROR(rig.GetAll(get_keys, batch));
  RETURN_IF_ERROR(PutRepeat(rig, seed + 1, batch, /*verify=*/false).status());
  MemcpyGbps(base_src->data(), rig.shm->data(), ws, pb);

  Series s;
  uint64_t next_seed = seed + 2;
  for (int r = 0; r < o.repeats; ++r) {
    // Interleaved so drift (other tenants of the VM, CPU clocks) hits the
    // baseline and kvtier alike.
    s.memcpy.push_back(MemcpyGbps(base_src->data(), rig.shm->data(), ws, pb));
    ASSIGN_OR_RETURN(double g, TimedGbps(ws, [&] { return rig.GetAll(get_keys, batch); }));
    s.get_batch.push_back(g);
    ASSIGN_OR_RETURN(double p, PutRepeat(rig, next_seed++, batch, /*verify=*/r == 0));
    s.put_batch.push_back(p);
    ASSIGN_OR_RETURN(g, TimedGbps(ws, [&] { return rig.GetAll(get_keys, 1); }));
    s.get_one.push_back(g);
    ASSIGN_OR_RETURN(p, PutRepeat(rig, next_seed++, 1, /*verify=*/false));
    s.put_one.push_back(p);
  }
  // Byte check of GET outside the timed region: zero the buffer, read again.
  std::memset(rig.shm->data(), 0, rig.shm->size());
  RETURN_IF_ERROR(rig.GetAll(get_keys, batch));
  if (size_t bad = rig.CountBad(get_keys); bad > 0)
    return absl::DataLossError(absl::StrCat(bad, " of ", get_keys.size(), " pages wrong after GET"));
  RETURN_IF_ERROR(rig.DeleteAll(get_keys));

  Summary mc = Summarize(s.memcpy);
  nlohmann::json j = {{"page_bytes", pb}, {"batch_pages", batch},
                      {"batch_bytes", batch * pb}, {"working_set_bytes", ws},
                      {"repeats", o.repeats}, {"memcpy_gbps", ToJson(mc)},
                      {"bytes_verified", true}};
  std::printf("throughput %s pages (working set %s per repeat, memcpy %.2f GB/s [%.2f..%.2f]):\n",
              HumanBytes(pb).c_str(), HumanBytes(ws).c_str(), mc.median, mc.min, mc.max);
  auto add = [&](const char* name, const std::vector<double>& v, size_t pages) {
    Summary x = Summarize(v);
    j[name] = {{"gbps", ToJson(x)}, {"ratio_to_memcpy", x.median / mc.median},
               {"pages_per_request", pages}};
    std::printf("  %-10s %4zu pages/request (%8s): %6.2f GB/s [%.2f..%.2f]  %.2fx memcpy\n", name,
                pages, HumanBytes(pages * pb).c_str(), x.median, x.min, x.max, x.median / mc.median);
  };
  add("get_batch", s.get_batch, batch);
  add("put_batch", s.put_batch, batch);
  add("get_one", s.get_one, 1);
  add("put_one", s.put_one, 1);
  std::fflush(stdout);
  return j;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunThroughput(const BenchOptions& o) {
  nlohmann::json out = nlohmann::json::array();
  for (uint64_t pb : o.page_sizes) {
    auto j = RunOneSize(o, pb);
    if (!j.ok())
      return absl::Status(j.status().code(),
                          absl::StrCat("throughput, ", HumanBytes(pb), " pages: ", j.status().message()));
    out.push_back(*std::move(j));
  }
  return out;
}

}  // namespace kvtier::bench
