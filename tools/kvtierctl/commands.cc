// The one-shot commands: stats, ping, tenants, evict, flush. Each opens one
// session (tenant/token from the flags or $KVTIER_TENANT/$KVTIER_TOKEN),
// sends one request (ping: --count) and prints a table or, with --json, JSON.
#include <chrono>
#include <cstdio>

#include "client/wire_calls.h"
#include "absl/strings/str_format.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

using Clock = std::chrono::steady_clock;

std::string Message(const absl::Status& st) { return std::string(st.message()); }

absl::StatusOr<TierKind> ParseTier(const std::string& name) {
  if (name.empty()) return TierKind::kNone;
  if (name == "hbm") return TierKind::kHbm;
  if (name == "host") return TierKind::kHost;
  if (name == "nvme") return TierKind::kNvme;
  if (name == "remote") return TierKind::kRemote;
  return absl::InvalidArgumentError("--tier=" + name + ": want hbm, host, nvme or remote");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Connect(const Options& o) {
  return Client::Connect(o.client);
}

int CmdStats(const Options& o) {
  auto client = Connect(o);
  if (!client.ok()) return Fail(Message(client.status()));
  auto stats = WireStats(**client);
  if (!stats.ok()) return Fail(Message(stats.status()));
  if (o.json) PrintJson(ToJson(*stats));
  else PrintStatsTables(*stats);
  return kOk;
}

int CmdPing(const Options& o) {
  const auto t0 = Clock::now();
  auto client = Connect(o);
  if (!client.ok()) return Fail(Message(client.status()));
  const double connect_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const int count = o.count > 0 ? o.count : 1;
  double min_us = 1e300, max_us = 0, sum_us = 0;
  wire::PingReply last;
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    auto reply = WirePing(**client);
    if (!reply.ok()) return Fail(Message(reply.status()));
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    min_us = std::min(min_us, us);
    max_us = std::max(max_us, us);
    sum_us += us;
    last = *reply;
  }
  const std::string endpoint = o.client.endpoint.empty() ? "the default endpoint" : o.client.endpoint;
  if (o.json) {
    nlohmann::json j = ToJson(last);
    j["endpoint"] = endpoint;
    j["count"] = count;
    j["rtt_us"] = {{"min", min_us}, {"avg", sum_us / count}, {"max", max_us}};
    j["connect_us"] = connect_us;
    PrintJson(j);
    return kOk;
  }
  std::printf("kvtierd %s at %s: rtt %s (min %s, max %s over %d), connect+hello %s\n",
              last.version().c_str(), endpoint.c_str(), Micros(sum_us / count).c_str(),
              Micros(min_us).c_str(), Micros(max_us).c_str(), count, Micros(connect_us).c_str());
  std::printf("up %.1f s; session namespace '%s'%s\n", last.uptime_ms() / 1000.0,
              last.namespace_().c_str(), last.admin() ? " (admin)" : "");
  return kOk;
}

int CmdTenants(const Options& o) {
  auto client = Connect(o);
  if (!client.ok()) return Fail(Message(client.status()));
  auto reply = WireTenants(**client);
  if (!reply.ok()) return Fail(Message(reply.status()));
  if (o.json) {
    PrintJson(ToJson(*reply));
    return kOk;
  }
  std::printf("%-16s %5s %9s %11s  %s\n", "TENANT", "ADMIN", "PAGES", "BYTES",
              "PER TIER (used / quota, reserved)");
  for (const auto& t : reply->tenants()) {
    std::string tiers;
    for (const char* tier : {"hbm", "host", "nvme"}) {
      auto used = t.tier_bytes().find(tier);
      auto quota = t.tier_quota_bytes().find(tier);
      if (used == t.tier_bytes().end() && quota == t.tier_quota_bytes().end()) continue;
      absl::StrAppendFormat(&tiers, "%s%s %s / %s", tiers.empty() ? "" : ", ", tier,
                            Bytes(used == t.tier_bytes().end() ? 0 : used->second),
                            quota == t.tier_quota_bytes().end() ? "-" : Bytes(quota->second));
      if (auto r = t.tier_reserved_bytes().find(tier); r != t.tier_reserved_bytes().end())
        absl::StrAppendFormat(&tiers, ", %s reserved", Bytes(r->second));
    }
    std::printf("%-16s %5s %9lu %11s  %s\n", t.name().c_str(), t.admin() ? "yes" : "no",
                (unsigned long)t.pages(), Bytes(t.bytes()).c_str(), tiers.c_str());
  }
  return kOk;
}

int CmdEvict(const Options& o) {
  auto tier = ParseTier(o.tier);
  if (!tier.ok()) return Fail(Message(tier.status()), kUsage);
  if (o.all == (o.pages > 0))
    return Fail("evict: give exactly one of --pages=N (N > 0) or --all", kUsage);
  auto client = Connect(o);
  if (!client.ok()) return Fail(Message(client.status()));
  auto r = (*client)->Evict(o.ns, *tier, o.all ? 0 : o.pages);
  if (!r.ok()) return Fail(Message(r.status()));
  const std::string ns = o.ns.empty() ? (*client)->namespace_name() : o.ns;
  const std::string where = o.tier.empty() ? "the store (dropped)" : "the " + o.tier + " tier";
  if (o.json) {
    PrintJson({{"namespace", ns},
               {"tier", o.tier.empty() ? "all" : o.tier},
               {"evicted", r->evicted},
               {"remaining", r->remaining}});
  } else {
    std::printf("evicted %lu pages of namespace '%s' from %s; %lu pages of it remain\n",
                (unsigned long)r->evicted, ns.c_str(), where.c_str(), (unsigned long)r->remaining);
  }
  return kOk;
}

int CmdFlush(const Options& o) {
  auto client = Connect(o);
  if (!client.ok()) return Fail(Message(client.status()));
  auto r = (*client)->Flush();
  if (!r.ok()) return Fail(Message(r.status()));
  if (o.json) {
    PrintJson({{"flushed", r->flushed}, {"not_flushed", r->not_flushed}});
  } else {
    std::printf("flushed %lu pages to the persistent tier; %lu pages still in RAM (pinned or "
                "stored meanwhile)\n",
                (unsigned long)r->flushed, (unsigned long)r->not_flushed);
  }
  return kOk;
}

}  // namespace kvtier::ctl
