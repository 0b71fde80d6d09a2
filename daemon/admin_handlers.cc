// Operator requests: PING (any session), TENANTS and FLUSH (admin sessions),
// EVICT (a session's own namespace, or any namespace for an admin). EVICT and
// FLUSH demote to NVMe or sync, so they run on a copy-engine worker and the
// frontend keeps serving meanwhile.
#include <limits>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

bool IsAdmin(const Session& s) { return s.tenant != nullptr && s.tenant->admin; }

absl::Status NeedAdmin(const Session& s, absl::string_view op) {
  if (IsAdmin(s)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      op, ": tenant '", s.tenant ? s.tenant->name : "?",
      "' is not an admin (connect with the token of a tenant that has \"admin\": true in the "
      "tenants file)"));
}

// The result of an operator job, filled on a worker, sent by its finish.
struct AdminJob {
  uint64_t request_id = 0;
  std::string routing_id;
  absl::Status status;
  wire::Response response;

  wire::Response Finish() {
    wire::Response r = status.ok() ? std::move(response) : ErrorResponse(request_id, status);
    r.set_version(kProtocolVersion);
    r.set_request_id(request_id);
    return r;
  }
};

}  // namespace

absl::StatusOr<Daemon::Reply> Daemon::HandlePing(Session& s) {
  Reply reply;
  auto* p = reply.response.mutable_ping();
  p->set_version(KVTIER_VERSION);
  p->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - started_));
  p->set_namespace_(s.tenant ? s.tenant->name : "");
  p->set_admin(IsAdmin(s));
  return reply;
}

absl::StatusOr<Daemon::Reply> Daemon::HandleTenants(Session& s) {
  RETURN_IF_ERROR(NeedAdmin(s, "TENANTS"));
  tiers::StoreSnapshot snap = store_->Snapshot();
  Reply reply;
  auto* tr = reply.response.mutable_tenants();
  for (const Tenant& t : tenants_.tenants()) {
    wire::TenantInfo* info = tr->add_tenants();
    info->set_name(t.name);
    info->set_admin(t.admin);
    for (const auto& n : snap.namespaces) {
      if (n.name != t.name) continue;
      info->set_pages(n.pages);
      info->set_bytes(n.bytes);
      for (const auto& [tier, bytes] : n.tier_bytes)
        (*info->mutable_tier_bytes())[std::string(tiers::TierName(tier))] = bytes;
      for (const auto& [tier, bytes] : n.tier_quota_bytes)
        if (bytes > 0) (*info->mutable_tier_quota_bytes())[std::string(tiers::TierName(tier))] = bytes;
      for (const auto& [tier, bytes] : n.tier_reserved_bytes)
        (*info->mutable_tier_reserved_bytes())[std::string(tiers::TierName(tier))] = bytes;
    }
  }
  return reply;
}

absl::Status Daemon::SubmitEvict(Session& s, const DecodedRequest& d,
                                 const std::string& routing_id) {
  const wire::Evict& e = d.request.evict();
  const std::string own = s.tenant ? s.tenant->name : "";
  tiers::NamespaceId ns = s.ns;
  std::string name = own;
  if (!e.namespace_().empty() && e.namespace_() != own) {
    // Checked before the name is looked up, so a non-admin cannot probe
    // which namespaces exist.
    if (!IsAdmin(s))
      return absl::PermissionDeniedError(absl::StrCat(
          "EVICT: tenant '", own, "' may evict only its own namespace; evicting '",
          e.namespace_().substr(0, 64), "' needs an admin tenant's token"));
    auto it = tenant_ns_.find(e.namespace_());
    if (it == tenant_ns_.end())
      return absl::NotFoundError(absl::StrCat("EVICT: no namespace '", e.namespace_(), "'"));
    ns = it->second;
    name = e.namespace_();
  }
  std::optional<tiers::TierKind> tier;
  if (e.tier() != wire::TIER_NONE) tier = static_cast<tiers::TierKind>(e.tier());
  const uint64_t max_pages = e.all() ? std::numeric_limits<uint64_t>::max() : e.pages();
  auto job = std::make_shared<AdminJob>();
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  tiers::TierManager* store = store_.get();
  tiers::SharedCache* shared = shared_.get();
  spdlog::info("EVICT by tenant '{}': namespace '{}', tier {}, {} pages", LogSafe(own), LogSafe(name),
               tier ? tiers::TierName(*tier) : "all (drop)",
               e.all() ? std::string("all") : std::to_string(max_pages));
  engine_->Submit({[job, store, shared, ns, tier, max_pages] {
                    auto evicted = store->EvictNamespace(ns, tier, max_pages);
                    // Pages that left the store for the shared cache are
                    // there when EVICT returns (the operator's flush to it).
                    if (shared != nullptr) shared->Drain();
                    if (!evicted.ok()) {
                      job->status = absl::Status(evicted.status().code(),
                                                 absl::StrCat("EVICT: ", evicted.status().message()));
                      return;
                    }
                    auto* r = job->response.mutable_evict();
                    r->set_evicted(*evicted);
                    r->set_remaining(store->NamespacePages(ns));
                  }},
                  [job] { return ReplyFrames(job->routing_id, Reply{job->Finish(), {}}); });
  return absl::OkStatus();
}

absl::Status Daemon::SubmitFlush(Session& s, const DecodedRequest& d,
                                 const std::string& routing_id) {
  RETURN_IF_ERROR(NeedAdmin(s, "FLUSH"));
  auto job = std::make_shared<AdminJob>();
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  tiers::TierManager* store = store_.get();
  spdlog::info("FLUSH by tenant '{}'", LogSafe(s.tenant->name));
  engine_->Submit({[job, store] {
                    auto flushed = store->FlushToPersistent();
                    if (!flushed.ok()) {
                      job->status = absl::Status(flushed.status().code(),
                                                 absl::StrCat("FLUSH: ", flushed.status().message()));
                      return;
                    }
                    tiers::StoreSnapshot snap = store->Snapshot();
                    uint64_t left = 0;
                    for (size_t t = 0; t + 1 < snap.tiers.size(); ++t) left += snap.tiers[t].pages;
                    auto* r = job->response.mutable_flush();
                    r->set_flushed(*flushed);
                    r->set_not_flushed(left);
                  }},
                  [job] { return ReplyFrames(job->routing_id, Reply{job->Finish(), {}}); });
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
