// Prefetch in the daemon: the prefetcher's setup, the PREFETCH request, LOOKUP
// lookahead's counters in STATS, and GETs that depend on prefetch — the
// best_effort and timeout policies, waiting for in-flight promotions, and
// layer-wise delivery with a per-layer progress counter in the client's
// buffer (docs/PROTOCOL.md, "Prefetch").
#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/get_timer.h"
#include "kvtier/status_macros.h"

namespace kvtier::daemon {

namespace {

// Longest a wait_complete GET waits for promotions already running (they
// are demand jobs then, first in line; this only guards against a wedge).
constexpr absl::Duration kMaxDemandWait = absl::Seconds(30);

absl::Status CheckGetRanges(const GetJob& job) {
  const ClientBuffer& b = *job.buffer;
  RETURN_IF_ERROR(job.place.Check("GET", b, job.page_bytes));
  if (!job.layerwise) return absl::OkStatus();
  const uint64_t p = job.progress_offset;
  if (!b.CheckRange(p, 8).ok())
    return absl::OutOfRangeError(absl::StrCat("GET: layer_progress_offset ", p,
                                              " + 8 lies outside the ", b.size(), "-byte buffer"));
  return job.place.CheckDisjoint("GET: layer_progress_offset", p, 8, job.page_bytes);
}

// Reads pages [begin, end), every read below RAM in flight at once, and
// hands each readable page's bytes (valid during the call) to `use`. A page
// that cannot be read is a miss: corrupt on disk (never wrong bytes), or
// an I/O error, which also fails the GET.
template <typename Use>
void ReadRange(GetJob& job, size_t begin, size_t end, tiers::TierManager& store,
               prefetch::Prefetcher& pf, Use use) {
  auto on_page = [&](size_t k, absl::StatusOr<const uint8_t*> src) {
    const size_t i = begin + k;
    if (src.ok()) return use(i, *src);
    if (!absl::IsDataLoss(src.status())) job.Fail(src.status());
    job.tiers[i] = 0;
    job.pins[i].Reset();
  };
  ReadPagesForGet(store, &pf, absl::MakeSpan(job.pins).subspan(begin, end - begin), on_page,
                  pf.target_index());
}

// Layer-major copy, as the store hands layers over: layer l of every page
// (each verified: pages below RAM are read and checked layer by layer), then
// the progress counter = l+1 once every copy part is past layer l. A page that fails part-way is a miss in the
// reply; the layers of it already copied were right bytes.
class LayerCopy final : public tiers::LayerSink {
 public:
  // Pages [begin, ...) of the job: the store numbers them from 0.
  LayerCopy(GetJob& job, size_t begin)
      : job_(job),
        begin_(begin),
        base_(job.buffer->data()),
        progress_(*reinterpret_cast<uint64_t*>(base_ + job.progress_offset)) {}
  void Layer(size_t i, uint32_t l, const uint8_t* bytes) override {
    const uint64_t at = uint64_t{l} * job_.layer_bytes;
    if (absl::Status late = job_.place.CheckDeadline("GET"); !late.ok()) {
      PageFailed(i, std::move(late));
      return;
    }
    if (!job_.fault && !job_.place.Write(*job_.buffer, begin_ + i, at, bytes, job_.layer_bytes))
      job_.fault = true;
  }
  // This part delivered layer l; the counter covers the layers every part
  // delivered (a part may run ahead of another).
  void LayerDone(uint32_t l) override {
    delivered_ = l + 1;
    absl::MutexLock lock(&job_.progress_mu);
    ++job_.parts_done[l];
    while (job_.published < job_.layers && job_.parts_done[job_.published] == job_.parts)
      ++job_.published;
    const uint32_t n = job_.published;
    Guard([&] { progress_.store(n, std::memory_order_release); });
  }
  void PageFailed(size_t i, absl::Status why) override {
    if (!absl::IsDataLoss(why)) job_.Fail(std::move(why));
    job_.tiers[begin_ + i] = 0;  // the store resets the pin of a corrupt page itself
  }
  // After the read: layers this part never delivered (all its pages
  // failed, or it had none) must not hold the others' counter back.
  void Finish() {
    for (uint32_t l = delivered_; l < job_.layers; ++l) LayerDone(l);
  }

 private:
  // Once the buffer faulted (truncated by its owner), nothing more is copied.
  template <typename F>
  void Guard(F f) {
    if (!job_.fault && !GuardedRun(f)) job_.fault = true;
  }
  GetJob& job_;
  const size_t begin_;
  uint8_t* base_;
  std::atomic_ref<uint64_t> progress_;
  uint32_t delivered_ = 0;
};

// Pages [begin, end) of a layer-wise GET, on one copy worker: each part
// reads and copies its own pages, so the copy out of RAM uses every worker.
void CopyLayers(GetJob& job, size_t begin, size_t end, tiers::TierManager& store,
                prefetch::Prefetcher& pf) {
  LayerCopy copy(job, begin);
  ReadLayersForGet(store, &pf, absl::MakeSpan(job.pins).subspan(begin, end - begin),
                   job.layer_bytes, job.layers, copy, pf.target_index());
  copy.Finish();
}

void CopyPages(GetJob& job, size_t begin, size_t end, tiers::TierManager& store,
               prefetch::Prefetcher& pf) {
  ReadRange(job, begin, end, store, pf, [&](size_t i, const uint8_t* src) {
    if (absl::Status late = job.place.CheckDeadline("GET"); !late.ok()) {
      job.tiers[i] = 0;
      job.Fail(std::move(late));
      return;
    }
    if (!job.place.Write(*job.buffer, i, 0, src, job.page_bytes)) job.fault = true;
  });
}

}  // namespace

absl::Status Daemon::InitPrefetch() {
  ASSIGN_OR_RETURN(prefetcher_, prefetch::Prefetcher::Create(config_.prefetch, store_.get()));
  const int target = store_->TierIndex(config_.prefetch.target);
  for (tiers::TierKind k : {tiers::TierKind::kHbm, tiers::TierKind::kHost, tiers::TierKind::kNvme})
    below_prefetch_target_[static_cast<size_t>(k)] = store_->TierIndex(k) > target;
  return absl::OkStatus();
}

void Daemon::StopPrefetch() {
  if (prefetcher_) prefetcher_->Shutdown();  // GETs still waiting start their copies now
}

absl::StatusOr<Daemon::Reply> Daemon::HandlePrefetch(Session& s, const DecodedRequest& d) {
  if (!s.layout)
    return absl::FailedPreconditionError("PREFETCH: the session declared no layout at HELLO");
  const wire::Prefetch& p = d.request.prefetch();
  const tiers::TierKind want =
      p.target() == wire::TIER_NONE ? tiers::TierKind::kHost : static_cast<tiers::TierKind>(p.target());
  if (want != config_.prefetch.target)
    return absl::InvalidArgumentError(absl::StrCat(
        "PREFETCH: target tier '", std::string(tiers::TierName(want)), "' is not supported; this ",
        "daemon prefetches into '", std::string(tiers::TierName(config_.prefetch.target)), "'"));
  prefetch::Hint hint{.cls = prefetch::JobClass::kHint,
                      .priority = p.priority(),
                      .lease = absl::Milliseconds(p.lease_ms())};
  if (p.deadline_ms() > 0) hint.deadline = absl::Now() + absl::Milliseconds(p.deadline_ms());
  prefetch::ScheduleResult r = prefetcher_->Schedule(s.ns, d.keys, hint);
  Reply reply;
  auto* pr = reply.response.mutable_prefetch();
  pr->set_queued(r.queued);
  pr->set_merged(r.merged);
  pr->set_resident(r.resident);
  pr->set_missing(r.missing);
  pr->set_rejected(r.rejected);
  return reply;
}

uint32_t Daemon::StartLookahead(const Session& s, absl::Span<const PageKey> keys,
                                const tiers::LookupResult& found) {
  if (!prefetcher_ || found.hits == 0 || s.page_bytes == 0) return 0;
  // The common case, every hit in RAM already, costs a table look-up per
  // hit here rather than the prefetcher's per-hit tier search.
  if (std::none_of(found.tiers.begin(), found.tiers.end(), [&](tiers::TierKind t) {
        const auto k = static_cast<size_t>(t);
        return k < below_prefetch_target_.size() && below_prefetch_target_[k];
      }))
    return 0;
  return prefetcher_->OnLookup(s.ns, keys, found.tiers).queued;
}

bool Daemon::UsesPrefetchPath(const Session& s, const DecodedRequest& d) const {
  const wire::Get& g = d.request.get();
  if (g.policy() != wire::GET_WAIT_COMPLETE || g.layerwise()) return true;
  // A plain GET joins promotions in flight instead of racing them (shm
  // buffers; a device buffer takes the GPU path as it is).
  auto b = s.buffers.find(g.buffer_id());
  if (b == s.buffers.end() || b->second->on_device()) return false;
  return prefetcher_ != nullptr && prefetcher_->AnyPending(s.ns, d.keys);
}

absl::Status Daemon::SubmitPolicyGet(Session& s, const DecodedRequest& d,
                                     const std::string& routing_id) {
  if (!s.layout) return absl::FailedPreconditionError("GET: the session declared no layout");
  const wire::Get& g = d.request.get();
  auto job = std::make_shared<GetJob>();  // its timer starts now
  ASSIGN_OR_RETURN(job->buffer, FindBuffer(s, g.buffer_id(), "GET"));
  if (job->buffer->on_device())
    return absl::FailedPreconditionError(
        "GET: policies other than wait_complete and layer-wise delivery need a shm buffer "
        "(GPU buffers are not supported there yet)");
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  job->ns = s.ns;
  job->keys = d.keys;
  job->place = PagePlacement::Of(g);
  RETURN_IF_ERROR(job->place.CheckDeadline("GET"));
  job->page_bytes = s.page_bytes;
  job->layer_bytes = s.layout->LayerBytes();
  job->layers = s.layout->layers;
  job->policy = g.policy();
  job->layerwise = g.layerwise();
  job->progress_offset = g.layer_progress_offset();
  RETURN_IF_ERROR(CheckGetRanges(*job));
  job->prefetch_waits = static_cast<uint32_t>(prefetcher_->CountPending(s.ns, d.keys));
  auto start = [this, job] { StartPolicyGet(job); };
  switch (job->policy) {
    case wire::GET_BEST_EFFORT: start(); break;
    case wire::GET_TIMEOUT:
      prefetcher_->WhenReady(s.ns, d.keys, /*schedule_below_target=*/true,
                             absl::Now() + absl::Milliseconds(g.timeout_ms()), start);
      break;
    default:
      prefetcher_->WhenReady(s.ns, d.keys, false, absl::Now() + kMaxDemandWait,
                             start);
  }
  return absl::OkStatus();
}

// Runs on the frontend or a prefetcher thread: touches only the job, the
// store, the prefetcher and the engine (all thread-safe), never the session.
void Daemon::StartPolicyGet(std::shared_ptr<GetJob> job) {
  const size_t n = job->keys.size();
  job->pins.resize(n);
  job->tiers.assign(n, '\0');
  std::vector<PageKey> below;  // not in RAM under best_effort / timeout
  const int target = prefetcher_->target_index();
  for (size_t i = 0; i < n; ++i) {
    const int where = store_->Locate(job->ns, job->keys[i]);
    if (job->policy != wire::GET_WAIT_COMPLETE && where > target) {
      below.push_back(job->keys[i]);
      continue;
    }
    std::optional<tiers::PagePin> pin = store_->PinForRead(job->ns, job->keys[i]);
    if (!pin || pin->bytes() != job->page_bytes) continue;
    prefetcher_->OnDemandRead(job->ns, job->keys[i]);  // its lease is no longer needed
    job->tiers[i] = static_cast<char>(pin->tier());
    job->pins[i] = *std::move(pin);
  }
  ReportFetchedAsRemote(job->keys, job->tiers);
  // The pages reported missing now come up for a retry.
  if (!below.empty())
    prefetcher_->Schedule(job->ns, below, prefetch::Hint{});
  std::vector<CopyEngine::Part> parts;
  tiers::TierManager* store = store_.get();
  prefetch::Prefetcher* pf = prefetcher_.get();
  const auto ranges = SplitRanges(n, job->page_bytes, engine_->threads());
  if (job->layerwise) {
    job->parts = static_cast<uint32_t>(ranges.size());
    {
      absl::MutexLock lock(&job->progress_mu);
      job->parts_done.assign(job->layers, 0);
    }
    uint8_t* counter = job->buffer->data() + job->progress_offset;
    if (!GuardedRun([&] {
          std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(counter))
              .store(0, std::memory_order_release);
        }))
      job->fault = true;
  }
  for (auto [b, e] : ranges) {
    if (job->layerwise) {
      parts.push_back([job, store, pf, b = b, e = e] { CopyLayers(*job, b, e, *store, *pf); });
    } else {
      parts.push_back([job, store, pf, b = b, e = e] { CopyPages(*job, b, e, *store, *pf); });
    }
  }
  job->timer->Wrap(parts, job->timer);
  job->timer->Submitted();
  GetStages* stages = &metrics_.get_stages;
  engine_->Submit(std::move(parts), [job, stages] {
    job->timer->Finish(*stages);
    Reply reply;
    if (job->fault) {
      reply.response = ErrorResponse(
          job->request_id, absl::FailedPreconditionError(absl::StrCat(
                               "GET: buffer '", job->buffer->name(),
                               "' could not be accessed during the copy (truncated?)")));
    } else if (absl::Status error = job->error.Get(); !error.ok()) {
      reply.response = ErrorResponse(job->request_id, error);
    } else {
      reply.response.set_version(kProtocolVersion);
      reply.response.set_request_id(job->request_id);
      auto* gr = reply.response.mutable_get();
      gr->set_tiers(job->tiers);
      if (job->layerwise) gr->set_layers(job->layers);
      gr->set_prefetch_waits(job->prefetch_waits);
    }
    job->pins.clear();
    return ReplyFrames(job->routing_id, std::move(reply));
  });
}

void Daemon::FillPrefetchStats(wire::StatsReply* out) const {
  if (!prefetcher_) return;
  const prefetch::PrefetchCounters c = prefetcher_->counters();
  wire::PrefetchStats* p = out->mutable_prefetch();
  p->set_issued(c.issued);
  p->set_completed_in_time(c.completed_in_time);
  p->set_late(c.late);
  p->set_wasted(c.wasted);
  p->set_dropped(c.dropped);
  p->set_demand_waited(c.demand_waited);
  p->set_taken_by_get(c.taken_by_get);
  p->set_merged(c.merged);
  p->set_rejected(c.rejected);
  p->set_failed(c.failed);
  p->set_lease_expired(c.lease_expired);
  p->set_lease_refused(c.lease_refused);
  p->set_lookup_leased(c.lookup_leased);
  p->set_lookup_lease_refused(c.lookup_lease_refused);
  p->set_lease_revoked(c.lease_revoked);
  p->set_lease_bound_refused(c.lease_bound_refused);
  p->set_demand_jobs(c.demand_jobs);
  p->set_promoted_pages(c.promoted_pages);
  p->set_promoted_bytes(c.promoted_bytes);
  p->set_queued(c.queued);
  p->set_inflight(c.inflight);
  p->set_leased_pages(c.leased_pages);
  p->set_pinned_bytes(c.pinned_bytes);
  p->set_cancelled(c.cancelled);
}

}  // namespace kvtier::daemon
