// The daemon's side of the shared cache (tiers/shared_cache/shared_cache.h):
// a LOOKUP whose chains miss here asks the cluster, a GET of keys missing
// here fetches them into ordinary PUT reservations and is then dispatched
// again, and a DELETE forgets the tenant's records cluster-wide. Each is
// answered through the completion socket once the cluster has answered, so
// the frontend never waits on the network; what a callback needs is
// captured by value (the session may end meanwhile).
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/completion_poster.h"
#include "daemon/daemon.h"
#include "daemon/remote_setup.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {

absl::Status Daemon::InitSharedCache() {
  if (!config_.remote.enabled()) return absl::OkStatus();
  ASSIGN_OR_RETURN(shared_, CreateSharedCache(config_, tenants_));
  spdlog::info("shared cache: {}", shared_->backing());
  return absl::OkStatus();
}

void Daemon::StopSharedCache() {
  if (shared_) shared_->Stop();
  if (poster_) poster_->Close();
}

absl::Status Daemon::SubmitLookup(Session& s, const DecodedRequest& d,
                                  const std::string& routing_id) {
  ASSIGN_OR_RETURN(LookupPlan plan, PlanLookup(s, d));
  std::vector<PageKey> keys;
  for (const ChainLookup& c : plan.chains) keys.insert(keys.end(), c.ask.begin(), c.ask.end());
  if (keys.empty() || poster_ == nullptr) {
    SendReply(routing_id, BuildLookupReply(plan));
    return absl::OkStatus();
  }
  auto held = std::make_shared<LookupPlan>(std::move(plan));
  shared_->Contains(
      s.tenant->name, std::move(keys),
      [poster = poster_, plan = held, routing_id](std::vector<bool> present) {
        // Each chain goes on with the leading keys the cluster holds.
        size_t at = 0;
        for (ChainLookup& c : plan->chains) {
          uint32_t n = 0;
          while (n < c.ask.size() && present[at + n]) ++n;
          c.hits += n;
          c.tiers.append(n, static_cast<char>(tiers::TierKind::kRemote));
          at += c.ask.size();
        }
        poster->Post(ReplyFrames(routing_id, BuildLookupReply(*plan)));
      });
  return absl::OkStatus();
}

absl::Status Daemon::SubmitDelete(Session& s, const DecodedRequest& d,
                                  const std::string& routing_id) {
  uint32_t deleted = 0;
  for (const PageKey& k : d.keys) deleted += store_->Delete(s.ns, k) ? 1 : 0;
  const uint64_t request_id = d.request.request_id();
  auto reply_with = [request_id](uint32_t deleted, uint32_t forgotten) {
    Reply reply;
    reply.response = OkResponse(request_id);
    reply.response.mutable_delete_()->set_deleted(deleted);
    reply.response.mutable_delete_()->set_forgotten(forgotten);
    return reply;
  };
  if (shared_ == nullptr || poster_ == nullptr) {
    SendReply(routing_id, reply_with(deleted, 0));
    return absl::OkStatus();
  }
  shared_->Forget(
      s.tenant->name, d.keys,
      [poster = poster_, routing_id, request_id, deleted, reply_with](absl::Status st,
                                                                       uint64_t forgotten) {
        Reply reply;
        if (st.ok()) {
          reply = reply_with(deleted, static_cast<uint32_t>(forgotten));
        } else {
          reply.response = ErrorResponse(
              request_id, absl::Status(st.code(), absl::StrCat("DELETE: ", deleted,
                                                               " pages deleted here; ",
                                                               st.message())));
        }
        poster->Post(ReplyFrames(routing_id, std::move(reply)));
      });
  return absl::OkStatus();
}

bool Daemon::StartSharedFetch(Session& s, const DecodedRequest& d, const std::string& routing_id,
                              Frames& frames) {
  if (shared_ == nullptr || poster_ == nullptr || s.page_bytes == 0 || d.keys.empty())
    return false;
  // Each key missing here becomes an ordinary PUT before it is fetched:
  // claimed (a key stored or fetched meanwhile is a dedup, not fetched
  // twice), charged to the tenant's quota, a slot reserved — without I/O,
  // as the frontend must. The cache opens each record straight into its
  // slot where that is host memory nothing else reads. A key that finds no
  // room is not fetched: the GET misses it.
  std::vector<PageKey> keys;
  std::vector<uint8_t*> dst;
  std::vector<tiers::Reservation> rs;
  for (size_t i = 0; i < d.keys.size(); ++i) {
    if (store_->Locate(s.ns, d.keys[i]) >= 0) continue;  // a probe: the GET counts its hits
    // The parent until the record says (SetParent): the key before it.
    const PageKey parent = i > 0 ? d.keys[i - 1] : PageKey::Zero();
    absl::StatusOr<tiers::ReserveResult> r = store_->Reserve(s.ns, d.keys[i], parent, s.page_bytes);
    if (!r.ok() || r->outcome != tiers::PutOutcome::kReserved) continue;
    keys.push_back(d.keys[i]);
    dst.push_back(r->reservation.FetchesInPlace() ? r->reservation.data() : nullptr);
    rs.push_back(std::move(r->reservation));
  }
  if (keys.empty()) return false;
  auto request = std::make_shared<Frames>(std::move(frames));
  shared_->FetchInto(
      s.tenant->name, keys, s.page_bytes, std::move(dst),
      [poster = poster_, routing_id, request, keys,
       rs = std::make_shared<std::vector<tiers::Reservation>>(std::move(rs))](
          std::vector<tiers::FetchedPage> pages) {
        std::vector<tiers::Reservation> filled;
        std::vector<PageKey> stored;
        for (size_t i = 0; i < pages.size(); ++i) {
          tiers::Reservation& r = (*rs)[i];
          if (!pages[i].status.ok()) continue;  // released below: a miss
          r.SetParent(pages[i].parent);
          const absl::Status st = pages[i].bytes != nullptr ? r.FillFetched(pages[i].bytes.get())
                                                            : r.MarkFetched();
          if (!st.ok()) continue;
          filled.push_back(std::move(r));
          stored.push_back(keys[i]);
        }
        rs->clear();  // the pages that did not come: their slots and claims go
        if (!filled.empty()) tiers::Reservation::CommitAll(filled);
        Frames out;
        out.emplace_back(routing_id.data(), routing_id.size());
        out.emplace_back(kRedispatchMarker.data(), kRedispatchMarker.size());
        out.emplace_back(stored.data(), stored.size() * sizeof(PageKey));
        for (zmq::message_t& f : *request) out.push_back(std::move(f));
        poster->Post(std::move(out));
      });
  return true;
}

void Daemon::ReportFetchedAsRemote(absl::Span<const PageKey> keys, std::string& tiers) const {
  if (fetched_keys_.empty()) return;
  for (size_t i = 0; i < keys.size() && i < tiers.size(); ++i)
    if (tiers[i] != 0 && fetched_keys_.contains(keys[i]))
      tiers[i] = static_cast<char>(tiers::TierKind::kRemote);
}

void Daemon::FillSharedCacheStats(wire::StatsReply* out) const {
  if (shared_ == nullptr) return;
  const tiers::SharedCacheCounters c = shared_->counters();
  wire::SharedCacheStats* w = out->mutable_shared_cache();
  w->set_backing(shared_->backing());
  w->set_published(c.published);
  w->set_publish_drops(c.publish_drops);
  w->set_published_bytes(c.published_bytes);
  w->set_lookups(c.lookups);
  w->set_lookup_keys(c.lookup_keys);
  w->set_lookup_hits(c.lookup_hits);
  w->set_fetch_keys(c.fetch_keys);
  w->set_fetch_hits(c.fetch_hits);
  w->set_fetch_misses(c.fetch_misses);
  w->set_fetched_bytes(c.fetched_bytes);
  w->set_io_errors(c.io_errors);
  w->set_rejected(c.rejected);
  w->set_oversized(c.oversized);
  w->set_malformed(c.malformed);
  w->set_forgotten(c.forgotten);
  w->set_forget_errors(c.forget_errors);
  w->set_node_down_events(c.node_down_events);
  w->set_down_nodes(c.down_nodes);
  w->set_frontend_io(c.frontend_io);
}

}  // namespace kvtier::daemon
