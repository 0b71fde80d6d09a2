// Request handlers. Each checks what only it can check (session state,
// buffer bounds, page sizes) and either answers at once or submits a copy job.
#include <sys/socket.h>

#include <cstring>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

Layout FromWire(const wire::Layout& l) {
  return Layout{l.layers(), l.kv_heads(), l.head_dim(), l.tokens_per_page(),
                static_cast<Dtype>(l.dtype())};
}

absl::Status NeedLayout(const Session& s, absl::string_view op) {
  if (!s.layout)
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": the session declared no layout at HELLO, so it cannot move pages"));
  return absl::OkStatus();
}

void FreePin(void*, void* hint) { delete static_cast<tiers::PagePin*>(hint); }

// A batched LOOKUP copies packed keys straight into PageKeys.
static_assert(sizeof(PageKey) == kPageKeyBytes && std::is_trivially_copyable_v<PageKey>);

}  // namespace

absl::StatusOr<Daemon::Reply> Daemon::HandleHello(const std::string& routing_id,
                                                   const DecodedRequest& d) {
  const wire::Hello& h = d.request.hello();
  // The handshake authenticated the connection (connection_guard.h): the
  // session's tenant is that one; HELLO may name it, never another.
  if (from_.user.empty())
    return absl::UnauthenticatedError("HELLO: this connection did not authenticate");
  if (!h.tenant().empty() && h.tenant() != from_.user)
    return absl::PermissionDeniedError(absl::StrCat(
        "HELLO: names tenant '", LogSafe(h.tenant()), "', but this connection authenticated as '",
        LogSafe(from_.user), "' (a connection's tenant is the one its handshake named)"));
  const Tenant* tenant = tenants_.Find(from_.user);
  if (tenant == nullptr)
    return absl::UnauthenticatedError("HELLO: the connection's tenant is no longer configured");
  const tiers::NamespaceId ns = tenant_ns_.at(tenant->name);
  // Per connection and per tenant first, so one tenant opening sessions
  // without end runs into its own limit long before the daemon's.
  if (sessions_.SessionsOfPeer(routing_id) >= static_cast<size_t>(config_.max_sessions_per_connection))
    return absl::ResourceExhaustedError(absl::StrCat(
        "HELLO: this connection already has ", config_.max_sessions_per_connection,
        " sessions (--max_sessions_per_connection); BYE one or open another connection"));
  const size_t tenant_limit =
      tenant->max_sessions > 0 ? tenant->max_sessions : config_.max_sessions_per_tenant;
  if (sessions_.SessionsOfNamespace(ns) >= tenant_limit)
    return absl::ResourceExhaustedError(absl::StrCat(
        "HELLO: tenant '", tenant->name, "' already has ", tenant_limit,
        " sessions (its max_sessions in the tenants file, else --max_sessions_per_tenant)"));
  if (sessions_.size() >= static_cast<size_t>(config_.max_sessions))
    return absl::ResourceExhaustedError(
        absl::StrCat("HELLO: session limit of ", config_.max_sessions, " reached"));
  std::optional<Layout> layout;
  if (h.has_layout()) {
    layout = FromWire(h.layout());
    if (layout->PageBytes() > store_->MaxPageBytes())
      return absl::InvalidArgumentError(absl::StrCat(
          "HELLO: pages of layout ", layout->DebugString(), " are ", layout->PageBytes(),
          " bytes; this daemon's tiers hold pages up to ", store_->MaxPageBytes(), " bytes"));
  }
  Session& s = sessions_.Create(routing_id, ns);
  s.tenant = tenant;
  s.connection = from_.connection;
  s.layout = layout;
  s.page_bytes = layout ? layout->PageBytes() : 0;
  s.client_name = h.client_name().substr(0, 128);
  spdlog::info("session opened: tenant '{}', client '{}', layout {}", LogSafe(tenant->name),
               LogSafe(s.client_name),
               layout ? layout->DebugString() : "none");
  Reply reply;
  auto* hr = reply.response.mutable_hello();
  hr->set_session_id(s.id);
  hr->set_namespace_(tenant->name);
  hr->set_page_bytes(s.page_bytes);
  hr->set_layout_id(layout ? layout->Id() : 0);
  hr->set_max_keys_per_request(kMaxKeysPerRequest);
  if (fd_inbox_) hr->set_buffer_socket(fd_inbox_->path());
  hr->add_features("page_runs");
  hr->add_features("deadline");
  return reply;
}

absl::StatusOr<Daemon::Reply> Daemon::HandleRegister(Session& s, const DecodedRequest& d) {
  const wire::RegisterBuffer& r = d.request.register_buffer();
  const bool by_fd = !r.fd_ticket().empty();
  // The daemon's own arenas are never a client buffer, whatever the name
  // (by fd, the name is only a label: the client can hand over only what it
  // holds open).
  if (!by_fd && (absl::StartsWith(r.shm_name(), "/kvtier-host") || IsOwnDeviceObject(r.shm_name()) ||
                 (!config_.host.shm_name.empty() && r.shm_name() == config_.host.shm_name)))
    return absl::PermissionDeniedError(
        absl::StrCat("REGISTER_BUFFER: '", r.shm_name(), "' is reserved for the daemon"));
  if (s.buffers.size() >= static_cast<size_t>(config_.max_buffers_per_session))
    return absl::ResourceExhaustedError(absl::StrCat(
        "REGISTER_BUFFER: at most ", config_.max_buffers_per_session, " buffers per session"));
  // Counted before mapping: a mapping costs address space and, once
  // touched, memory.
  const uint64_t limit = s.tenant->max_registered_bytes > 0 ? s.tenant->max_registered_bytes
                                                            : config_.max_registered_bytes_per_tenant;
  const uint64_t registered = sessions_.RegisteredBytes(s.ns);
  if (r.size() > limit || registered > limit - r.size())
    return absl::ResourceExhaustedError(absl::StrCat(
        "REGISTER_BUFFER: ", r.size(), " more bytes would make ", registered + r.size(),
        " bytes registered by tenant '", s.tenant->name, "', over its limit of ", limit,
        " (max_registered_bytes in the tenants file, else --max_registered_bytes_per_tenant)"));
  std::shared_ptr<ClientBuffer> buffer;
  if (by_fd) {
    ASSIGN_OR_RETURN(buffer, MapHandedBuffer(r));
  } else if (r.kind() == wire::BUFFER_SHM) {
    ASSIGN_OR_RETURN(buffer, ClientBuffer::Map(r.shm_name(), r.size()));
  } else {
    ASSIGN_OR_RETURN(buffer, MapDeviceBuffer(r));  // device_transfers.cc
  }
  const std::pair<uint64_t, uint64_t> object{buffer->device(), buffer->inode()};
  if (object.first == 0 && object.second == 0)
    return absl::InternalError(absl::StrCat(
        "REGISTER_BUFFER: '", LogSafe(buffer->name()), "' has no identity to check ownership by"));
  BufferOwner& owner = buffer_owners_[object];
  if (!owner.DropEnded() && owner.ns != s.ns)
    return absl::PermissionDeniedError(absl::StrCat(
        "REGISTER_BUFFER: '", buffer->name(), "' is registered by another tenant"));
  owner.ns = s.ns;
  owner.buffers.push_back(buffer);
  warmer_->Warm(s.ns, buffer);  // off the frontend; a GET before it ends just faults
  const uint32_t id = sessions_.AddBuffer(s, std::move(buffer));
  Reply reply;
  reply.response.mutable_register_buffer()->set_buffer_id(id);
  return reply;
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> Daemon::MapHandedBuffer(
    const wire::RegisterBuffer& r) {
  if (fd_inbox_ == nullptr)
    return absl::FailedPreconditionError(
        "REGISTER_BUFFER: this daemon takes no buffers by fd (it has no ipc socket); register "
        "the buffer by name");
  absl::StatusOr<HandedFd> taken = fd_inbox_->Take(r.fd_ticket());
  if (!taken.ok())
    return absl::Status(taken.status().code(),
                        absl::StrCat("REGISTER_BUFFER: ", taken.status().message()));
  const HandedFd& handed = *taken;
  // The ticket is a secret of whoever handed the fd over; the uid is checked
  // too, so a ticket that leaked to another user opens nothing (and is
  // spent: it was taken above).
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (from_.fd < 0 || getsockopt(from_.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      len != sizeof(cred) || cred.pid == 0)
    return absl::PermissionDeniedError(
        "REGISTER_BUFFER: a buffer handed over by fd can be registered only over the ipc socket "
        "(this connection's user is unknown)");
  if (cred.uid != handed.uid())
    return absl::PermissionDeniedError(absl::StrCat(
        "REGISTER_BUFFER: the buffer under this ticket was handed over by uid ", handed.uid(),
        ", not by this connection's uid ", cred.uid));
  std::string label = r.shm_name().empty()
                          ? absl::StrCat("buffer fd from pid ", handed.pid())
                          : absl::StrCat("buffer '", LogSafe(r.shm_name()), "' (by fd)");
  return ClientBuffer::MapFd(handed.fd(), r.size(), std::move(label));
}

void Daemon::PruneBufferOwners() {
  for (auto it = buffer_owners_.begin(); it != buffer_owners_.end();) {
    if (it->second.DropEnded()) buffer_owners_.erase(it++);
    else ++it;
  }
}

absl::StatusOr<Daemon::Reply> Daemon::HandleUnregister(Session& s, const DecodedRequest& d) {
  uint32_t id = d.request.unregister_buffer().buffer_id();
  if (auto it = s.buffers.find(id); it != s.buffers.end()) warmer_->Cancel(s.ns, it->second.get());
  // In-flight copies hold their own reference; the mapping goes with the last.
  if (!sessions_.RemoveBuffer(s, id))
    return absl::NotFoundError(absl::StrCat("UNREGISTER_BUFFER: buffer ", id, " is not registered"));
  Reply reply;
  reply.response.mutable_unregister_buffer();
  return reply;
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> Daemon::FindBuffer(Session& s, uint32_t buffer_id,
                                                                 absl::string_view op) {
  auto it = s.buffers.find(buffer_id);
  if (it == s.buffers.end())
    return absl::NotFoundError(
        absl::StrCat(op, ": buffer ", buffer_id, " is not registered in this session"));
  return it->second;
}

// One chain of a LOOKUP: its leading hits (and their tiers), the
// lookahead for those on NVMe, and with lease_ms its leases. Shared by the
// single-chain and the batched form, so both mean the same. A chain whose
// every local hit counts (all leased, with a lease) and that misses after
// them may go on in the shared cache: its remaining keys are `ask`.
absl::StatusOr<Daemon::ChainLookup> Daemon::LookupChain(const Session& s,
                                                        absl::Span<const PageKey> chain,
                                                        uint32_t lease_ms) {
  tiers::LookupResult result = store_->Lookup(s.ns, chain);
  ChainLookup out;
  // Lookahead first: a leased page is "merged" for the prefetcher, so it
  // would not be queued for promotion after its lease (holds do not stop a
  // promotion).
  out.prefetching = StartLookahead(s, chain, result);  // NVMe hits start coming up now
  const uint32_t local = result.hits;
  if (lease_ms > 0 && result.hits > 0) {
    if (!prefetcher_)
      return absl::FailedPreconditionError(
          "LOOKUP: lease_ms needs the prefetcher, and this daemon runs with it off");
    // Only what is held may be counted on: the chain ends at the first page
    // that could not be leased. Pages this tenant already held for the
    // longest lease in the window are hits, unleased (`leased` < `hits`).
    result.hits = prefetcher_->LeaseHits(s.ns, chain.first(result.hits),
                                         absl::Milliseconds(lease_ms), &out.leased);
  }
  out.hits = result.hits;
  for (uint32_t i = 0; i < out.hits; ++i) out.tiers.push_back(static_cast<char>(result.tiers[i]));
  if (shared_ != nullptr && s.page_bytes > 0 && out.hits == local && local < chain.size())
    out.ask.assign(chain.begin() + local, chain.end());
  return out;
}

// Both forms of LOOKUP: every chain looked up locally, in order (so later
// chains of a batch may find the tenant's lease cap reached by earlier
// ones). The decoder checked that chain_lengths cuts the packed keys
// exactly into chains of 1 to kMaxKeysPerRequest keys; each is copied out
// into chain_scratch_, whose capacity outlives the request.
absl::StatusOr<Daemon::LookupPlan> Daemon::PlanLookup(const Session& s, const DecodedRequest& d) {
  const wire::Lookup& l = d.request.lookup();
  LookupPlan plan;
  plan.request_id = d.request.request_id();
  plan.batched = !l.chain_lengths().empty();
  if (!plan.batched) {
    ASSIGN_OR_RETURN(ChainLookup chain, LookupChain(s, d.keys, l.lease_ms()));
    plan.chains.push_back(std::move(chain));
    return plan;
  }
  const char* packed = l.keys().data();
  plan.chains.reserve(l.chain_lengths_size());
  for (const uint32_t n : l.chain_lengths()) {
    chain_scratch_.resize(n);
    std::memcpy(chain_scratch_.data(), packed, size_t{n} * kPageKeyBytes);
    packed += size_t{n} * kPageKeyBytes;
    ASSIGN_OR_RETURN(ChainLookup chain, LookupChain(s, chain_scratch_, l.lease_ms()));
    plan.chains.push_back(std::move(chain));
  }
  return plan;
}

Daemon::Reply Daemon::BuildLookupReply(const LookupPlan& plan) {
  Reply reply;
  reply.response = OkResponse(plan.request_id);
  auto* lr = reply.response.mutable_lookup();
  std::string* tiers = lr->mutable_tiers();
  uint64_t hits = 0, prefetching = 0, leased = 0;
  for (const ChainLookup& c : plan.chains) {
    if (plan.batched) {
      lr->add_chain_hits(c.hits);
      lr->add_chain_prefetching(c.prefetching);
    }
    tiers->append(c.tiers);
    hits += c.hits;
    prefetching += c.prefetching;
    leased += c.leased;
  }
  // At most kMaxLookupBatchKeys each: they fit.
  lr->set_hits(static_cast<uint32_t>(hits));
  lr->set_prefetching(static_cast<uint32_t>(prefetching));
  lr->set_leased(static_cast<uint32_t>(leased));
  return reply;
}

absl::StatusOr<Daemon::Reply> Daemon::HandleStats(Session& s, const DecodedRequest&) {
  Reply reply;
  *reply.response.mutable_stats() = BuildStats(s);
  return reply;
}

namespace {

// Frames for the hits, in key order: RAM pages go zero-copy from their
// slots (each frame owns its pin, released by the ZeroMQ I/O thread once
// the bytes are on the wire), pages read from disk are copied once.
Daemon::Reply InlineReply(GetJob& job) {
  Daemon::Reply reply;
  for (size_t i = 0; i < job.pins.size(); ++i) {
    tiers::PagePin& pin = job.pins[i];
    if (!pin.valid() || job.src[i] == nullptr) continue;
    if (job.src[i] == pin.data()) {
      const uint64_t n = pin.bytes();
      auto* owned = new tiers::PagePin(std::move(pin));
      reply.payloads.emplace_back(const_cast<uint8_t*>(job.src[i]), n, &FreePin, owned);
    } else {
      reply.payloads.emplace_back(job.src[i], pin.bytes());
    }
  }
  reply.response.mutable_get()->set_tiers(job.tiers);
  return reply;
}

// Every page below RAM is read at once (a copy worker); the frames need its
// bytes until the reply: its promoted slot, or a copy of its bounce buffer.
void ReadInlinePages(GetJob& job, tiers::TierManager& store, prefetch::Prefetcher* pf) {
  auto keep = [&](size_t i, absl::StatusOr<const uint8_t*> src) {
    if (job.src[i] != nullptr) return;  // in RAM from the start
    if (src.ok()) {
      if ((job.src[i] = job.pins[i].data()) != nullptr) return;
      job.bounce[i].assign(*src, *src + job.pins[i].bytes());
      job.src[i] = job.bounce[i].data();
    } else if (absl::IsDataLoss(src.status())) {
      job.tiers[i] = 0;  // failed its checksum: a miss, never wrong bytes
    } else {
      job.Fail(src.status());
    }
  };
  ReadPagesForGet(store, pf, absl::MakeSpan(job.pins), keep);
}

}  // namespace

// Pins on the frontend; a GET whose pages are all in RAM is answered at
// once, one that needs the disk (promotion or a verified read) goes to the
// copy engine, so the frontend never reads the disk.
absl::Status Daemon::SubmitGetInline(Session& s, const DecodedRequest& d,
                                     const std::string& routing_id) {
  RETURN_IF_ERROR(NeedLayout(s, "GET"));
  if (d.request.get().policy() != wire::GET_WAIT_COMPLETE)
    return absl::InvalidArgumentError(
        "GET: policies best_effort and timeout need a registered buffer (inline GET waits)");
  // An inline GET (remote clients): no buffer; page bytes travel as reply
  // frames.
  auto job = std::make_shared<GetJob>();
  job->request_id = d.request.request_id();
  job->routing_id = routing_id;
  job->ns = s.ns;
  job->page_bytes = s.page_bytes;
  const size_t n = d.keys.size();
  job->pins.resize(n);
  job->src.assign(n, nullptr);
  job->bounce.resize(n);
  job->tiers.assign(n, '\0');
  bool in_ram = true;
  for (size_t i = 0; i < n; ++i) {
    std::optional<tiers::PagePin> pin = store_->PinForRead(s.ns, d.keys[i]);
    if (!pin || pin->bytes() != s.page_bytes) continue;  // absent, or another layout's page
    job->tiers[i] = static_cast<char>(pin->tier());
    job->src[i] = pin->data();
    in_ram = in_ram && job->src[i] != nullptr;
    job->pins[i] = *std::move(pin);
  }
  ReportFetchedAsRemote(d.keys, job->tiers);
  // Before any promotion: a lease's pin would make the page look busy.
  if (prefetcher_) prefetcher_->OnDemandRead(s.ns, d.keys);
  if (in_ram) {
    for (const tiers::PagePin& pin : job->pins) pin.CountReadOut();  // no ReadPages to count them
    Reply reply = InlineReply(*job);
    reply.response.set_version(kProtocolVersion);
    reply.response.set_request_id(job->request_id);
    reply.response.set_code(wire::OK);
    SendReply(routing_id, std::move(reply));
    return absl::OkStatus();
  }
  tiers::TierManager* store = store_.get();
  prefetch::Prefetcher* pf = prefetcher_.get();
  CopyEngine::Part read = [job, store, pf] { ReadInlinePages(*job, *store, pf); };
  engine_->Submit({std::move(read)}, [job] {
    Reply reply;
    if (absl::Status error = job->error.Get(); !error.ok()) {
      reply.response = ErrorResponse(job->request_id, error);
    } else {
      reply = InlineReply(*job);
      reply.response.set_version(kProtocolVersion);
      reply.response.set_request_id(job->request_id);
    }
    job->pins.clear();
    return ReplyFrames(job->routing_id, std::move(reply));
  });
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
