// `redis`: the throughput workload against redis-server through hiredis, the
// way a Redis-backed KV cache (LMCache's remote backend) moves pages: SET/GET
// of page-size values over loopback TCP, pipelined in batches the size of
// kvtier's. GET copies each reply into the client's arena, as a cache user
// must; kvtier's GET lands there directly.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/page_pattern.h"
#include "kvtier/status_macros.h"

#ifdef KVTIER_BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace kvtier::bench {

#ifndef KVTIER_BENCH_HAVE_HIREDIS

absl::StatusOr<nlohmann::json> RunRedis(const BenchOptions&, const nlohmann::json&) {
  return absl::UnimplementedError("kvtier-bench was built without hiredis (libhiredis-dev)");
}

#else
namespace {

struct RedisDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisPtr = std::unique_ptr<redisContext, RedisDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

std::string RedisKey(const PageKey& k) { return "kvtier-bench:" + k.ToHex(); }

absl::StatusOr<ReplyPtr> NextReply(redisContext* c) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK || r == nullptr)
    return absl::UnavailableError(absl::StrCat("redis: ", c->errstr));
  ReplyPtr reply(static_cast<redisReply*>(r));
  if (reply->type == REDIS_REPLY_ERROR)
    return absl::InternalError(absl::StrCat("redis: ", std::string(reply->str, reply->len)));
  return reply;
}

// SET of every page from the rig's buffer, `batch` commands per pipeline.
absl::Status SetAll(redisContext* c, const Rig& rig, const std::vector<std::string>& keys,
                    size_t batch) {
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    for (size_t i = b; i < b + n; ++i) {
      redisAppendCommand(c, "SET %b %b", keys[i].data(), keys[i].size(), rig.page(i),
                         size_t(rig.page_bytes));
      // Stream each command out as it is built: hiredis would otherwise grow
      // one output buffer to the whole batch (32 MiB) and fault it in anew
      // every batch, which measures malloc, not Redis. Replies are read after.
      for (int done = 0; !done;)
        if (redisBufferWrite(c, &done) != REDIS_OK)
          return absl::UnavailableError(absl::StrCat("redis: ", c->errstr));
    }
    for (size_t i = 0; i < n; ++i) RETURN_IF_ERROR(NextReply(c).status());
  }
  return absl::OkStatus();
}

// GET of every page into the rig's buffer, `batch` commands per pipeline.
absl::Status GetAll(redisContext* c, const Rig& rig, const std::vector<std::string>& keys,
                    size_t batch) {
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    for (size_t i = b; i < b + n; ++i) redisAppendCommand(c, "GET %b", keys[i].data(), keys[i].size());
    for (size_t i = b; i < b + n; ++i) {
      ASSIGN_OR_RETURN(ReplyPtr r, NextReply(c));
      if (r->type != REDIS_REPLY_STRING || r->len != rig.page_bytes)
        return absl::NotFoundError(absl::StrCat("redis GET of page ", i, " missed"));
      std::memcpy(rig.page(i), r->str, rig.page_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status DelAll(redisContext* c, const std::vector<std::string>& keys) {
  for (const auto& k : keys) redisAppendCommand(c, "UNLINK %b", k.data(), k.size());
  for (size_t i = 0; i < keys.size(); ++i) RETURN_IF_ERROR(NextReply(c).status());
  return absl::OkStatus();
}

std::vector<std::string> RedisKeys(const std::vector<PageKey>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(RedisKey(k));
  return out;
}

absl::StatusOr<double> Timed(uint64_t bytes, const std::function<absl::Status()>& f) {
  auto t0 = Clock::now();
  RETURN_IF_ERROR(f());
  return bytes / Seconds(t0, Clock::now()) / 1e9;
}

// Redis has no dedup, so SET over the same keys really stores every byte
// again. Fresh keys each repeat (as kvtier's PUT needs) would make Redis's
// allocator take new memory whose first touch costs ~6 ms per MiB on this VM
// (redis-benchmark SET of 1 MiB: ~160/s with -r, ~1900/s without): that
// measures the hypervisor, not Redis. kvtier's arena was warmed likewise.
absl::StatusOr<double> SetRepeat(redisContext* c, Rig& rig, const std::vector<PageKey>& keys,
                                 const std::vector<std::string>& rk, size_t batch) {
  rig.Fill(keys);
  return Timed(rig.pages() * rig.page_bytes, [&] { return SetAll(c, rig, rk, batch); });
}

absl::StatusOr<nlohmann::json> RunOneSize(const BenchOptions& o, redisContext* c, uint64_t pb,
                                          const nlohmann::json* kv) {
  const uint64_t ws = std::max(o.working_set_bytes, o.batch_bytes) / pb * pb;
  const size_t batch = std::max<uint64_t>(1, o.batch_bytes / pb);
  // No daemon session is needed; the rig only lends its buffer and layout.
  Rig rig;
  ASSIGN_OR_RETURN(rig.layout, LayoutForPageBytes(pb));
  rig.page_bytes = pb;
  ASSIGN_OR_RETURN(rig.shm, ShmBuffer::Create(ws));
  std::memset(rig.shm->data(), 0, ws);
  for (uint64_t off = 0; off < ws; off += pb) rig.offsets.push_back(off);

  const uint64_t seed = RunNonce() ^ (pb * 7919) ^ 0x5ed15;
  std::vector<PageKey> keys = SyntheticChain(rig.layout, seed, rig.pages());
  std::vector<std::string> rk = RedisKeys(keys);
  rig.Fill(keys);
  RETURN_IF_ERROR(SetAll(c, rig, rk, batch));
  RETURN_IF_ERROR(GetAll(c, rig, rk, batch));  // warm-up
  std::vector<PageKey> set_keys = SyntheticChain(rig.layout, seed + 1, rig.pages());
  std::vector<std::string> set_rk = RedisKeys(set_keys);
  RETURN_IF_ERROR(SetRepeat(c, rig, set_keys, set_rk, batch).status());  // warm-up
  std::vector<double> get_b, set_b, get_1, set_1;
  for (int r = 0; r < o.repeats; ++r) {
    ASSIGN_OR_RETURN(double g, Timed(ws, [&] { return GetAll(c, rig, rk, batch); }));
    get_b.push_back(g);
    ASSIGN_OR_RETURN(double s, SetRepeat(c, rig, set_keys, set_rk, batch));
    set_b.push_back(s);
    ASSIGN_OR_RETURN(g, Timed(ws, [&] { return GetAll(c, rig, rk, 1); }));
    get_1.push_back(g);
    ASSIGN_OR_RETURN(s, SetRepeat(c, rig, set_keys, set_rk, 1));
    set_1.push_back(s);
  }
  std::memset(rig.shm->data(), 0, ws);
  RETURN_IF_ERROR(GetAll(c, rig, rk, batch));
  if (size_t bad = rig.CountBad(keys); bad > 0)
    return absl::DataLossError(absl::StrCat(bad, " pages wrong from redis"));
  // And what the SETs stored.
  std::memset(rig.shm->data(), 0, ws);
  RETURN_IF_ERROR(GetAll(c, rig, set_rk, batch));
  if (size_t bad = rig.CountBad(set_keys); bad > 0)
    return absl::DataLossError(absl::StrCat(bad, " pages wrong from redis after SET"));
  RETURN_IF_ERROR(DelAll(c, rk));
  RETURN_IF_ERROR(DelAll(c, set_rk));

  nlohmann::json j = {{"page_bytes", pb}, {"batch_pages", batch}, {"working_set_bytes", ws},
                      {"repeats", o.repeats}, {"bytes_verified", true}};
  std::printf("redis %s pages (pipelined %zu = %s per batch; working set %s per repeat):\n",
              HumanBytes(pb).c_str(), batch, HumanBytes(batch * pb).c_str(), HumanBytes(ws).c_str());
  auto add = [&](const char* name, const char* kv_name, const std::vector<double>& v) {
    Summary x = Summarize(v);
    j[name] = {{"gbps", ToJson(x)}};
    double kvg = kv ? (*kv)[kv_name]["gbps"]["median"].get<double>() : 0;
    if (kvg > 0) j[name]["kvtier_over_redis"] = kvg / x.median;
    std::printf("  %-10s %6.2f GB/s [%.2f..%.2f]   kvtier %s %.2f GB/s = %.2fx Redis\n", name,
                x.median, x.min, x.max, kv_name, kvg, kvg / x.median);
  };
  add("get_batch", "get_batch", get_b);
  add("set_batch", "put_batch", set_b);
  add("get_one", "get_one", get_1);
  add("set_one", "put_one", set_1);
  // Conservative form: kvtier batched against Redis's better mode (on this
  // VM one-at-a-time can beat deep pipelines of large values).
  if (kv != nullptr) {
    for (auto [name, kv_name, a, b] : {std::tuple{"get", "get_batch", &get_b, &get_1},
                                       std::tuple{"set", "put_batch", &set_b, &set_1}}) {
      const double best = std::max(Summarize(*a).median, Summarize(*b).median);
      const double ratio = (*kv)[kv_name]["gbps"]["median"].get<double>() / best;
      j[absl::StrCat(name, "_kvtier_batch_over_best_redis")] = ratio;
      std::printf("  %s: kvtier batched / best Redis mode = %.2fx\n", name, ratio);
    }
  }
  std::fflush(stdout);
  return j;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunRedis(const BenchOptions& o, const nlohmann::json& kvtier) {
  const size_t colon = o.redis.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(o.redis.substr(colon + 1), &port))
    return absl::InvalidArgumentError("--redis must be HOST:PORT, e.g. 127.0.0.1:6379");
  const std::string host = o.redis.substr(0, colon);
  RedisPtr c(redisConnectWithTimeout(host.c_str(), port, timeval{5, 0}));
  if (!c || c->err)
    return absl::UnavailableError(absl::StrCat("redis at ", o.redis, ": ", c ? c->errstr : "oom"));
  // Client-side tuning a Redis cache user would do for MiB-sized values:
  // keep hiredis's read buffer between replies (documented maxbuf = 0), and
  // keep freed reply memory in glibc's heap instead of unmapping it, so
  // each reply does not fault in fresh pages (~40x slower than a copy here).
  c->reader->maxbuf = 0;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  nlohmann::json out = nlohmann::json::array();
  for (uint64_t pb : o.page_sizes) {
    const nlohmann::json* kv = nullptr;
    for (const auto& k : kvtier)
      if (k["page_bytes"] == pb) kv = &k;
    ASSIGN_OR_RETURN(auto j, RunOneSize(o, c.get(), pb, kv));
    out.push_back(std::move(j));
  }
  return out;
}

#endif

}  // namespace kvtier::bench
