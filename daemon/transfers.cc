// GET and PUT through registered buffers (and inline PUT), wired to the
// sockets: the handlers check what only the session knows (layout, buffer,
// offsets, page sizes), DataPath plans the transfer on the frontend thread,
// the copy engine runs its parts in parallel, and the worker that finishes
// the last part turns the outcome into the reply frames.
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/get_timer.h"
#include "kvtier/status_macros.h"

namespace kvtier::daemon {
namespace {

// The placement a GET or PUT names (offsets, and runs for scattered pages),
// checked against the buffer and the session's page size.
template <typename Msg>
absl::StatusOr<PagePlacement> Placement(absl::string_view op, const ClientBuffer& buffer,
                                        const Msg& m, uint64_t page_bytes) {
  PagePlacement place = PagePlacement::Of(m);
  RETURN_IF_ERROR(place.CheckDeadline(op));  // e.g. queued while the daemon was stopped
  if (place.scattered() && buffer.on_device())
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": page_runs need a shm buffer; buffer '", buffer.name(),
        "' is GPU memory (scattered pages there are not supported yet)"));
  RETURN_IF_ERROR(place.Check(op, buffer, page_bytes));
  return place;
}

// The reply to a GET whose copies are done (or failed).
Daemon::Reply GetReply(const DataPath& data, GetJob& t) {
  Daemon::Reply reply;
  if (absl::Status st = data.FinishGet(t); !st.ok()) {
    reply.response = ErrorResponse(t.request_id, st);
  } else {
    reply.response = OkResponse(t.request_id);
    reply.response.mutable_get()->set_tiers(t.tiers);
  }
  return reply;
}

// The reply to a PUT once every key is settled.
Daemon::Reply PutReply(uint64_t request_id, const absl::StatusOr<PutSummary>& done) {
  Daemon::Reply reply;
  if (!done.ok()) {
    reply.response = ErrorResponse(request_id, done.status());
    return reply;
  }
  reply.response = OkResponse(request_id);
  auto* pr = reply.response.mutable_put();
  pr->set_stored(done->stored);
  pr->set_deduplicated(done->deduplicated);
  pr->set_not_stored(done->not_stored);
  if (done->not_stored > 0) pr->set_not_stored_reason(done->not_stored_reason);
  pr->set_page_status(std::string(done->page_status.begin(), done->page_status.end()));
  pr->set_leading_kept(done->leading_kept);
  return reply;
}

}  // namespace

bool Daemon::CopiesOnFrontend(const GetJob& t) const {
  if (t.buffer->on_device() || t.keys.size() * t.page_bytes > config_.frontend_copy_bytes)
    return false;
  for (const tiers::PagePin& pin : t.pins)
    if (pin.valid() && pin.data() == nullptr) return false;  // below RAM: a disk read
  return true;
}

bool Daemon::FillsOnFrontend(const PutTransfer& t) const {
  if (t.buffer != nullptr && t.buffer->on_device()) return false;
  if (t.reservations.size() * t.page_bytes > config_.frontend_copy_bytes) return false;
  // RAM slots only, with nothing to checksum, copy durably or publish: the
  // fill is a memcpy and the commit an index insert, never I/O.
  for (const tiers::Reservation& r : t.reservations)
    if (!r.FetchesInPlace() || r.NeedsHostBytes()) return false;
  return true;
}

absl::Status Daemon::SubmitGet(Session& s, const DecodedRequest& d, const std::string& routing_id) {
  if (!s.layout) return absl::FailedPreconditionError("GET: the session declared no layout");
  // Policies, layer-wise delivery, promotions in flight: prefetch_handlers.cc.
  if (UsesPrefetchPath(s, d)) return SubmitPolicyGet(s, d, routing_id);
  const wire::Get& g = d.request.get();
  ASSIGN_OR_RETURN(auto buffer, FindBuffer(s, g.buffer_id(), "GET"));
  ASSIGN_OR_RETURN(PagePlacement place, Placement("GET", *buffer, g, s.page_bytes));
  std::shared_ptr<GetJob> t =
      data_->PlanGet(s.ns, d.keys, s.page_bytes, std::move(buffer), std::move(place));
  t->request_id = d.request.request_id();
  t->routing_id = routing_id;
  ReportFetchedAsRemote(d.keys, t->tiers);
  if (CopiesOnFrontend(*t)) {
    t->timer->Submitted();
    data_->CopyGet(*t, 0, t->keys.size());
    t->timer->Finish(metrics_.get_stages);
    SendReply(routing_id, GetReply(*data_, *t));
    return absl::OkStatus();
  }
  const DataPath* data = data_.get();
  std::vector<CopyEngine::Part> parts;
  for (auto [b, e] : SplitRanges(d.keys.size(), s.page_bytes, engine_->threads()))
    parts.push_back([data, t, b = b, e = e] { data->CopyGet(*t, b, e); });
  t->timer->Wrap(parts, t->timer);
  t->timer->Submitted();
  GetStages* stages = &metrics_.get_stages;
  engine_->Submit(std::move(parts), [data, t, stages] {
    t->timer->Finish(*stages);
    return ReplyFrames(t->routing_id, GetReply(*data, *t));
  });
  return absl::OkStatus();
}

absl::Status Daemon::SubmitPut(Session& s, DecodedRequest& d, Frames& frames,
                               const std::string& routing_id) {
  if (!s.layout) return absl::FailedPreconditionError("PUT: the session declared no layout");
  const wire::Put& p = d.request.put();
  std::shared_ptr<ClientBuffer> buffer;
  PagePlacement place;
  std::vector<const uint8_t*> pages;
  if (p.buffer_id() != 0) {
    ASSIGN_OR_RETURN(buffer, FindBuffer(s, p.buffer_id(), "PUT"));
    ASSIGN_OR_RETURN(place, Placement("PUT", *buffer, p, s.page_bytes));
  } else {
    for (size_t i = 0; i < d.payloads.size(); ++i) {
      if (d.payloads[i].size() != s.page_bytes)
        return absl::InvalidArgumentError(absl::StrCat(
            "PUT: page ", i, " is ", d.payloads[i].size(), " bytes; the session's layout ",
            s.layout->DebugString(), " has ", s.page_bytes, "-byte pages"));
      pages.push_back(reinterpret_cast<const uint8_t*>(d.payloads[i].data()));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<PutTransfer> t,
                   data_->PlanPut(s.ns, d.keys, d.parent, s.page_bytes, std::move(buffer),
                                  std::move(place), std::move(pages)));
  // Inline pages point into the request's frames: they live until the reply.
  auto owned = std::make_shared<Frames>(p.buffer_id() == 0 ? std::move(frames) : Frames());
  const DataPath* data = data_.get();
  const uint64_t request_id = d.request.request_id();
  CopyEngine* engine = engine_.get();
  // Keys deduplicated against another PUT in flight are settled by it: its
  // resolution queues this reply as a job of its own, so no worker (and not
  // the frontend) waits for another job.
  auto later = [engine, request_id, routing_id](PutSummary s) {
    engine->Submit({}, [request_id, routing_id, s = std::move(s)] {
      return ReplyFrames(routing_id, PutReply(request_id, s));
    });
  };
  if (FillsOnFrontend(*t)) {
    data->FillPut(*t, 0, t->reservations.size());
    std::optional<absl::StatusOr<PutSummary>> done = data->FinishPut(t, std::move(later));
    if (done) SendReply(routing_id, PutReply(request_id, *done));
    return absl::OkStatus();
  }
  std::vector<CopyEngine::Part> parts;
  for (auto [b, e] : SplitRanges(t->reservations.size(), s.page_bytes, engine_->threads()))
    parts.push_back([data, t, b = b, e = e] { data->FillPut(*t, b, e); });
  engine_->Submit(std::move(parts), [data, t, owned, later, request_id, routing_id]() {
    std::optional<absl::StatusOr<PutSummary>> done = data->FinishPut(t, later);
    owned->clear();  // committed (or given up): the inline pages are no longer read
    return done ? ReplyFrames(routing_id, PutReply(request_id, *done))
                : std::vector<zmq::message_t>();
  });
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
