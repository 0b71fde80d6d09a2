// RawCluster (raw_cluster.h): hiredis only, no cluster library, so the
// baseline is the least a careful client would do per GET.
#include "bench/raw_cluster.h"

#include <hiredis/hiredis.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

absl::StatusOr<ReplyPtr> NextReply(redisContext* c) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK || r == nullptr)
    return absl::UnavailableError(absl::StrCat("redis: ", c->errstr));
  ReplyPtr reply(static_cast<redisReply*>(r));
  if (reply->type == REDIS_REPLY_ERROR)  // MOVED/ASK included: the map is stale
    return absl::InternalError(absl::StrCat("redis: ", std::string(reply->str, reply->len)));
  return reply;
}

absl::StatusOr<redisContext*> Dial(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port))
    return absl::InvalidArgumentError(absl::StrCat("bad node address '", addr, "'"));
  redisContext* c = redisConnectWithTimeout(addr.substr(0, colon).c_str(), port, timeval{5, 0});
  if (c == nullptr || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return absl::UnavailableError(absl::StrCat("redis at ", addr, ": ", why));
  }
  // The tuning a cache user does for MiB values (as `redis` does): keep the
  // read buffer between replies instead of freeing it after each one.
  c->reader->maxbuf = 0;
  return c;
}

}  // namespace

std::string DocumentedRecordKey(absl::string_view ns, const PageKey& key) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, ns.data(), ns.size());
  XXH3_64bits_update(&st, key.bytes.data(), key.bytes.size());
  const unsigned tag = static_cast<unsigned>(XXH3_64bits_digest(&st) & 0xffff);
  return absl::StrFormat("kvtier:{%04x}:%s:%s", tag, ns, key.ToHex());
}

uint16_t ClusterSlot(absl::string_view key) {
  const size_t open = key.find('{');
  if (open != absl::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != absl::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;  // CRC16/XMODEM: polynomial 0x1021, initial 0
  for (unsigned char ch : key) {
    crc ^= static_cast<uint16_t>(ch) << 8;
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
  }
  return crc & 16383;
}

RawCluster::~RawCluster() {
  for (Node& n : nodes_)
    if (n.ctx) redisFree(n.ctx);
}

absl::StatusOr<std::unique_ptr<RawCluster>> RawCluster::Connect(
    const std::vector<std::string>& seeds) {
  std::unique_ptr<RawCluster> rc(new RawCluster);
  absl::Status last = absl::InvalidArgumentError("no seeds");
  for (const std::string& s : seeds) {
    auto c = Dial(s);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    last = rc->LoadSlots(*c);
    redisFree(*c);
    if (last.ok()) return rc;
  }
  return last;
}

absl::Status RawCluster::LoadSlots(redisContext* seed) {
  ReplyPtr r(static_cast<redisReply*>(redisCommand(seed, "CLUSTER SLOTS")));
  if (!r || r->type != REDIS_REPLY_ARRAY)
    return absl::UnavailableError(
        absl::StrCat("CLUSTER SLOTS: ", r ? "not an array" : seed->errstr));
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* range = r->element[i];
    if (range->elements < 3 || range->element[2]->elements < 2) continue;
    const redisReply* master = range->element[2];
    const std::string addr =
        absl::StrCat(std::string(master->element[0]->str, master->element[0]->len), ":",
                     master->element[1]->integer);
    size_t idx = 0;
    while (idx < nodes_.size() && nodes_[idx].addr != addr) ++idx;
    if (idx == nodes_.size()) {
      ASSIGN_OR_RETURN(redisContext * c, Dial(addr));
      nodes_.push_back({addr, c});
    }
    for (long long s = range->element[0]->integer; s <= range->element[1]->integer; ++s)
      slot_node_[s] = static_cast<uint16_t>(idx);
  }
  if (nodes_.empty()) return absl::UnavailableError("CLUSTER SLOTS listed no master");
  return absl::OkStatus();
}

template <typename F>
absl::Status RawCluster::Round(const char* cmd, const std::vector<std::string>& keys, size_t b,
                               size_t e, F&& each) {
  std::vector<std::vector<size_t>> per_node(nodes_.size());
  for (size_t i = b; i < e; ++i) {
    const size_t n = NodeOf(keys[i]);
    redisAppendCommand(nodes_[n].ctx, "%s %b", cmd, keys[i].data(), keys[i].size());
    per_node[n].push_back(i);
  }
  // Every node gets its whole pipeline before any reply is read, so the
  // masters work in parallel while this thread drains them one by one.
  for (Node& n : nodes_)
    for (int done = 0; !done;)
      if (redisBufferWrite(n.ctx, &done) != REDIS_OK)
        return absl::UnavailableError(absl::StrCat("redis at ", n.addr, ": ", n.ctx->errstr));
  for (size_t n = 0; n < nodes_.size(); ++n)
    for (size_t i : per_node[n]) {
      ASSIGN_OR_RETURN(ReplyPtr r, NextReply(nodes_[n].ctx));
      RETURN_IF_ERROR(each(i, *r));
    }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RawCluster::CountMissing(const std::vector<std::string>& keys) {
  size_t missing = 0;
  RETURN_IF_ERROR(Round("EXISTS", keys, 0, keys.size(), [&](size_t, const redisReply& r) {
    missing += r.type != REDIS_REPLY_INTEGER || r.integer != 1;
    return absl::OkStatus();
  }));
  return missing;
}

absl::Status RawCluster::GetInto(const std::vector<std::string>& keys, size_t batch, uint64_t skip,
                                 uint64_t bytes, absl::Span<uint8_t* const> dst) {
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t e = std::min(keys.size(), b + batch);
    RETURN_IF_ERROR(Round("GET", keys, b, e, [&](size_t i, const redisReply& r) {
      if (r.type != REDIS_REPLY_STRING || r.len != skip + bytes + kDocumentedTagBytes)
        return absl::NotFoundError(absl::StrCat("raw GET of ", keys[i], " missed"));
      std::memcpy(dst[i], r.str + skip, bytes);
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::bench
