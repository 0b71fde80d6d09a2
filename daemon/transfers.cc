// GET and PUT through registered buffers (and inline PUT): the handlers pin or
// reserve pages on the frontend thread, then the copy engine moves the bytes
// in parallel parts and sends the reply when the last part is done.
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/device_transfers.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

absl::Status CheckOffsets(absl::string_view op, const ClientBuffer& buffer,
                          const google::protobuf::RepeatedField<uint64_t>& offsets,
                          uint64_t page_bytes) {
  for (int i = 0; i < offsets.size(); ++i) {
    absl::Status st = buffer.CheckRange(offsets[i], page_bytes);
    if (!st.ok())
      return absl::OutOfRangeError(absl::StrCat(op, ": page ", i, " at offset ", offsets[i], ": ",
                                                st.message()));
  }
  return absl::OkStatus();
}

absl::Status BufferFault(absl::string_view op, const ClientBuffer& b) {
  return absl::FailedPreconditionError(absl::StrCat(
      op, ": buffer '", b.name(), "' could not be accessed during the copy (was the shm object "
      "truncated after REGISTER_BUFFER?); nothing was stored"));
}

// tiers::DemandReadHook over the prefetcher: while a GET reads the disk,
// prefetch starts no new work.
class PrefetchDemandHook final : public tiers::DemandReadHook {
 public:
  explicit PrefetchDemandHook(prefetch::Prefetcher* p) : p_(p) {}
  void BeginDemandRead() override {
    if (p_ != nullptr) scope_.emplace(p_);
  }
  void EndDemandRead() override { scope_.reset(); }

 private:
  prefetch::Prefetcher* p_;
  std::optional<prefetch::Prefetcher::DemandScope> scope_;
};

// Shared state of one copy job; parts run on several workers at once.
struct JobState {
  uint64_t request_id = 0;
  std::string routing_id;
  std::shared_ptr<ClientBuffer> buffer;  // null for inline
  std::atomic<bool> fault{false};
  FirstError error;  // the first copy error
  void Fail(absl::Status st) { error.Set(std::move(st)); }
};

struct GetJob : JobState {
  tiers::TierManager* store = nullptr;
  tiers::HbmTier* hbm = nullptr;  // for device buffers (device_transfers.cc)
  prefetch::Prefetcher* prefetcher = nullptr;  // yields to our NVMe reads
  std::vector<tiers::PagePin> pins;  // invalid where the key missed
  std::vector<uint64_t> offsets;
  std::string tiers;
};

struct PutJob : JobState {
  tiers::HbmTier* hbm = nullptr;  // for device buffers (device_transfers.cc)
  std::vector<zmq::message_t> frames;  // inline pages (frames[0] is the header)
  std::vector<tiers::Reservation> reservations;
  std::vector<size_t> key_index;  // key of each reservation
  std::vector<uint64_t> offsets;
  uint32_t deduplicated = 0, not_stored = 0;
  std::string reserve_error;
  const uint8_t* Source(size_t key) const {
    if (!buffer) return static_cast<const uint8_t*>(frames[1 + key].data());
    return buffer->data() + offsets[key];
  }
};

void CopyGetRange(GetJob& job, size_t begin, size_t end) {
  if (job.buffer->on_device()) {
    absl::Status st = DeviceGet(*job.store, job.hbm, job.prefetcher, *job.buffer,
                                absl::MakeSpan(job.pins), job.offsets, job.tiers, begin, end);
    if (!st.ok()) job.Fail(st);
    return;
  }
  std::vector<uint8_t> bounce;
  for (size_t i = begin; i < end; ++i) {
    tiers::PagePin& pin = job.pins[i];
    if (!pin.valid()) continue;
    absl::StatusOr<const uint8_t*> src = ReadForGet(*job.store, job.prefetcher, pin, bounce);
    if (absl::IsDataLoss(src.status())) {
      job.tiers[i] = 0;  // corrupt on disk: a miss, never wrong bytes
      continue;
    }
    if (!src.ok()) {
      job.Fail(src.status());
      continue;
    }
    uint8_t* dst = job.buffer->data() + job.offsets[i];
    if (!GuardedRun([&] { std::memcpy(dst, *src, pin.bytes()); })) job.fault = true;
  }
}

void FillPutRange(PutJob& job, size_t begin, size_t end) {
  if (job.buffer && job.buffer->on_device()) {
    absl::Status st = DevicePut(job.hbm, *job.buffer, absl::MakeSpan(job.reservations),
                                job.key_index, job.offsets, begin, end);
    if (!st.ok()) job.Fail(st);
    return;
  }
  for (size_t r = begin; r < end; ++r) {
    const uint8_t* src = job.Source(job.key_index[r]);
    absl::Status st;
    bool ok = GuardedRun([&] { st = job.reservations[r].Fill(src); });
    if (!ok) job.fault = true;
    if (!st.ok()) job.Fail(st);
  }
}

}  // namespace

absl::StatusOr<const uint8_t*> ReadForGet(tiers::TierManager& store, prefetch::Prefetcher* pf,
                                          tiers::PagePin& pin, std::vector<uint8_t>& bounce,
                                          int promote_to) {
  PrefetchDemandHook hook(pf);
  return store.ReadPage(pin, bounce, tiers::ReadOptions{.promote_to = promote_to, .demand = &hook});
}

absl::Status Daemon::SubmitGet(Session& s, const DecodedRequest& d, const std::string& routing_id) {
  if (!s.layout) return absl::FailedPreconditionError("GET: the session declared no layout");
  // Policies, layer-wise delivery, promotions in flight: prefetch_handlers.cc.
  if (UsesPrefetchPath(s, d)) return SubmitPolicyGet(s, d, routing_id);
  const wire::Get& g = d.request.get();
  ASSIGN_OR_RETURN(auto buffer, FindBuffer(s, g.buffer_id(), "GET"));
  RETURN_IF_ERROR(CheckOffsets("GET", *buffer, g.offsets(), s.page_bytes));
  auto job = std::make_shared<GetJob>();
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  job->buffer = std::move(buffer);
  job->store = store_.get();
  job->hbm = hbm_;
  job->prefetcher = prefetcher_.get();
  job->offsets.assign(g.offsets().begin(), g.offsets().end());
  job->tiers.assign(d.keys.size(), '\0');
  job->pins.resize(d.keys.size());
  for (size_t i = 0; i < d.keys.size(); ++i) {
    std::optional<tiers::PagePin> pin = store_->PinForRead(s.ns, d.keys[i]);
    if (!pin || pin->bytes() != s.page_bytes) continue;
    job->tiers[i] = static_cast<char>(pin->tier());
    job->pins[i] = *std::move(pin);
  }
  // The pages are pinned now: leases taken for them are no longer needed.
  if (prefetcher_) prefetcher_->OnDemandRead(s.ns, d.keys);
  std::vector<CopyEngine::Part> parts;
  for (auto [b, e] : SplitRanges(d.keys.size(), s.page_bytes, engine_->threads()))
    parts.push_back([job, b = b, e = e] { CopyGetRange(*job, b, e); });
  engine_->Submit(std::move(parts), [job] {
    Reply reply;
    if (job->fault) {
      reply.response = ErrorResponse(job->request_id, BufferFault("GET", *job->buffer));
    } else if (absl::Status error = job->error.Get(); !error.ok()) {
      reply.response = ErrorResponse(job->request_id, error);
    } else {
      reply.response.set_version(kProtocolVersion);
      reply.response.set_request_id(job->request_id);
      reply.response.mutable_get()->set_tiers(job->tiers);
    }
    job->pins.clear();
    return ReplyFrames(job->routing_id, std::move(reply));
  });
  return absl::OkStatus();
}

absl::Status Daemon::SubmitPut(Session& s, DecodedRequest& d, Frames& frames,
                               const std::string& routing_id) {
  if (!s.layout) return absl::FailedPreconditionError("PUT: the session declared no layout");
  const wire::Put& p = d.request.put();
  auto job = std::make_shared<PutJob>();
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  job->hbm = hbm_;
  if (p.buffer_id() != 0) {
    ASSIGN_OR_RETURN(job->buffer, FindBuffer(s, p.buffer_id(), "PUT"));
    RETURN_IF_ERROR(CheckOffsets("PUT", *job->buffer, p.offsets(), s.page_bytes));
    job->offsets.assign(p.offsets().begin(), p.offsets().end());
  } else {
    for (size_t i = 0; i < d.payloads.size(); ++i)
      if (d.payloads[i].size() != s.page_bytes)
        return absl::InvalidArgumentError(absl::StrCat(
            "PUT: page ", i, " is ", d.payloads[i].size(), " bytes; the session's layout ",
            s.layout->DebugString(), " has ", s.page_bytes, "-byte pages"));
  }
  for (size_t i = 0; i < d.keys.size(); ++i) {
    const PageKey& parent = i == 0 ? d.parent : d.keys[i - 1];
    auto r = store_->Reserve(s.ns, d.keys[i], parent, s.page_bytes);
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) return r.status();
      // A chain is useless past a missing page: stop here.
      job->not_stored = static_cast<uint32_t>(d.keys.size() - i);
      job->reserve_error = std::string(r.status().message());
      break;
    }
    if (r->outcome == tiers::PutOutcome::kDeduplicated) {
      ++job->deduplicated;
      continue;
    }
    job->reservations.push_back(std::move(r->reservation));
    job->key_index.push_back(i);
  }
  if (p.buffer_id() == 0) job->frames = std::move(frames);  // pages must outlive the copy
  if (job->reservations.empty() && job->not_stored > 0 && job->deduplicated == 0)
    return absl::ResourceExhaustedError(absl::StrCat("PUT: ", job->reserve_error));
  std::vector<CopyEngine::Part> parts;
  for (auto [b, e] : SplitRanges(job->reservations.size(), s.page_bytes, engine_->threads()))
    parts.push_back([job, b = b, e = e] { FillPutRange(*job, b, e); });
  engine_->Submit(std::move(parts), [job] {
    Reply reply;
    if (absl::Status error = job->error.Get(); job->fault || !error.ok()) {
      absl::Status st = job->fault ? BufferFault("PUT", *job->buffer) : error;
      job->reservations.clear();  // frees the slots: nothing half-written is published
      reply.response = ErrorResponse(job->request_id, st);
      return ReplyFrames(job->routing_id, std::move(reply));
    }
    // One sync for every durable copy; see CommitAll for the order. A page
    // whose copy could not be made durable is not stored, and says so.
    const tiers::CommitResult commit = tiers::Reservation::CommitAll(job->reservations);
    const uint32_t stored = static_cast<uint32_t>(commit.stored);
    job->not_stored += static_cast<uint32_t>(commit.not_stored);
    if (commit.not_stored > 0) {
      spdlog::warn("PUT: {} page(s) not stored: {}", commit.not_stored, commit.error.ToString());
      job->reserve_error = std::string(commit.error.message());
    }
    job->reservations.clear();
    job->frames.clear();
    reply.response.set_version(kProtocolVersion);
    reply.response.set_request_id(job->request_id);
    auto* pr = reply.response.mutable_put();
    pr->set_stored(stored);
    pr->set_deduplicated(job->deduplicated);
    pr->set_not_stored(job->not_stored);
    if (job->not_stored > 0) pr->set_not_stored_reason(job->reserve_error);
    return ReplyFrames(job->routing_id, std::move(reply));
  });
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
