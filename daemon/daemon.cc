// Daemon setup, the frontend loop and request routing; handlers live in
// handlers.cc, STATS in stats.cc.
#include "daemon/daemon.h"

#include "daemon/completion_poster.h"

#include <grp.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/endpoint.h"
#include "daemon/remote_setup.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"
#include "spdlog/spdlog.h"
#include "tiers/common/io_guard.h"
#include "tiers/host/host_tier.h"
#ifdef KVTIER_HAVE_REMOTE
#include "tiers/remote/redis_cluster.h"
#endif

namespace kvtier::daemon {
namespace {

std::atomic<int> g_daemon_seq{0};

// Largest header frame: a request naming kMaxKeysPerRequest keys with
// their parents and offsets takes ~200 KiB.
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
// Before a peer has a session it may send only a HELLO: one small frame.
constexpr uint64_t kMaxHelloBytes = 64 << 10;
// Frames of one request: routing id aside, a header and one page per key.
constexpr size_t kMaxFramesPerMessage = 1 + kMaxKeysPerRequest;
// How often the frontend looks for peers whose connection closed.
constexpr absl::Duration kPeerSweep = absl::Milliseconds(200);

// Gives `path` to group `gid` with `mode` (--socket_group: the socket 0660,
// a socket directory the daemon created 0710).
absl::Status GiveToGroup(const std::string& path, gid_t gid, mode_t mode) {
  if (chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0 || chmod(path.c_str(), mode) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("--socket_group: cannot give ", path, " to the group: ", strerror(errno)));
  return absl::OkStatus();
}

// A quota given for one tier also bounds every tier below it that has none
// of its own: a tenant held to 2 GiB of RAM must not flood NVMe instead.
absl::flat_hash_map<tiers::TierKind, uint64_t> InheritedQuotas(
    const absl::flat_hash_map<tiers::TierKind, uint64_t>& given) {
  absl::flat_hash_map<tiers::TierKind, uint64_t> out = given;
  uint64_t above = 0;
  for (tiers::TierKind kind : {tiers::TierKind::kHbm, tiers::TierKind::kHost, tiers::TierKind::kNvme}) {
    auto it = given.find(kind);
    if (it != given.end() && it->second > 0) above = it->second;
    else if (above > 0) out[kind] = above;
  }
  return out;
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)), ctx_(1) {}

Daemon::~Daemon() {
  metrics_http_.reset();  // it reads the store
  warmer_.reset();  // its threads may hold a buffer for one chunk
  StopPrefetch();  // waiting GETs hand their copies to the engine first
  StopSharedCache();  // its callbacks use store_ and the completion socket
  if (engine_) engine_->Shutdown();
  completions_.reset();
  guard_.reset();
  router_.reset();
  // Zero-copy replies still queued in ZeroMQ hold page pins; closing the
  // context releases them before the store they point into goes away.
  ctx_.close();
  ipc_file_.Remove();  // libzmq leaves it; a stale file would hide the system socket
  sessions_ = SessionTable();
  if (pinned_host_ != nullptr) device_->UnregisterHost(pinned_host_);
  prefetcher_.reset();  // its leases pin pages of store_
  store_.reset();
  shared_.reset();  // sends what the store published last
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config,
                                                       DeviceOptions device) {
  config.ApplyDefaults();
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Daemon> d(new Daemon(std::move(config)));
  d->device_options_ = device;
  RETURN_IF_ERROR(d->Init());
  return d;
}

absl::Status Daemon::Init() {
  InstallSigbusGuard();
  // Everything the daemon creates — state, NVMe data, the RocksDB index
  // (which asks for 0644), the socket — is for this user only: tenants'
  // page bytes and keys are in there.
  umask(077);
  started_ = absl::Now();
  // Before anything is opened: a second daemon on a live socket must touch
  // neither it nor the state (socket_file.h).
  if (!config_.ipc_socket.empty())
    RETURN_IF_ERROR(ClaimSocketPath(config_.ipc_socket, "--socket", SOCK_STREAM));
  if (config_.tenants_file.empty()) {
    tenants_ = TenantRegistry::Default();
    spdlog::warn("no --tenants_file: tenant 'default' accepts any token and is admin");
  } else {
    ASSIGN_OR_RETURN(tenants_, TenantRegistry::LoadFile(config_.tenants_file));
  }
  RETURN_IF_ERROR(EnsurePrivateDir(config_.state_dir, "state directory"));
  std::vector<std::unique_ptr<tiers::Tier>> tiers;
  RETURN_IF_ERROR(InitDevice(tiers));  // the HBM tier, if any, goes on top
  ASSIGN_OR_RETURN(auto host, tiers::CreateHostTier(config_.host));
  spdlog::info("host tier: {} MiB, {}", host->capacity_bytes() >> 20, host->backing());
  PinHostArena(*host);
  tiers.push_back(std::move(host));
  if (config_.nvme.capacity_bytes > 0) {
    ASSIGN_OR_RETURN(auto nvme, tiers::CreateNvmeTier(config_.nvme));
    // Pages move between the host arena and NVMe: io_uring fixed buffers.
    auto [base, len] = tiers.back()->Region();
    if (base != nullptr) (void)nvme->RegisterIoRegion(base, len);
    spdlog::info("nvme tier: {} MiB, {}", nvme->capacity_bytes() >> 20, nvme->backing());
    tiers.push_back(std::move(nvme));
  } else {
    spdlog::info("nvme tier: disabled (--nvme_bytes=0)");
  }
  RETURN_IF_ERROR(InitSharedCache());  // before the store, which publishes to it
  ASSIGN_OR_RETURN(store_,
                   tiers::TierManager::Create(config_.store, std::move(tiers), shared_.get()));
  for (const Tenant& t : tenants_.tenants()) {
    tiers::NamespaceConfig nc{.name = t.name,
                              .quota_bytes = InheritedQuotas(t.quota_bytes),
                              .reserved_bytes = t.reserved_bytes};
    ASSIGN_OR_RETURN(tiers::NamespaceId id, store_->AddNamespace(nc));
    tenant_ns_[t.name] = id;
  }
  absl::Time t0 = absl::Now();
  RETURN_IF_ERROR(store_->RecoverPersistent());
  for (const auto& t : store_->Snapshot().tiers)
    if (t.durable.recovered_pages > 0 || t.durable.dropped_records > 0)
      spdlog::info("{} tier: recovered {} pages, dropped {} invalid records in {:.0f} ms",
                   tiers::TierName(t.kind), t.durable.recovered_pages, t.durable.dropped_records,
                   absl::ToDoubleMilliseconds(absl::Now() - t0));
  RETURN_IF_ERROR(BindEndpoints());
  ASSIGN_OR_RETURN(engine_, CopyEngine::Create(ctx_, completion_endpoint_, config_.copy_threads));
  if (shared_) poster_ = std::make_shared<CompletionPoster>(ctx_, completion_endpoint_);
  ASSIGN_OR_RETURN(warmer_, BufferWarmer::Create(config_.warmup));
  RETURN_IF_ERROR(InitPrefetch());
  data_ = std::make_unique<DataPath>(store_.get(), hbm_, prefetcher_.get());
  // Last: the metrics thread reads the prefetcher's counters.
  RETURN_IF_ERROR(StartMetrics());
  return absl::OkStatus();
}

// Every connection authenticates in the ZeroMQ handshake before it can send
// a message (connection_guard.h): PLAIN (tenant and token), or CURVE when
// the operator gave the daemon a key. Set before bind: libzmq copies a
// socket's options into each connection as it is accepted.
absl::Status Daemon::SecureRouter() {
  ConnectionGuardConfig guard;
  guard.max_unauthenticated_per_peer = config_.max_unauthenticated_per_peer;
  guard.max_unauthenticated = config_.max_unauthenticated;
  if (!config_.curve_secret_key_file.empty()) {
    ASSIGN_OR_RETURN(std::string secret, LoadCurveSecretKey(config_.curve_secret_key_file));
    for (const Tenant& t : tenants_.tenants())
      if (!t.curve_public_key.empty()) guard.curve_tenant_by_key[t.curve_public_key] = t.name;
    if (guard.curve_tenant_by_key.empty())
      return absl::InvalidArgumentError(
          "--curve_secret_key_file: no tenant has a curve_public_key, so none could connect");
    router_->set(zmq::sockopt::curve_server, 1);
    router_->set(zmq::sockopt::curve_secretkey, secret);
  } else {
    router_->set(zmq::sockopt::plain_server, 1);
  }
  router_->set(zmq::sockopt::zap_domain, kZapDomain);
  router_->set(zmq::sockopt::handshake_ivl,
               static_cast<int>(absl::ToInt64Milliseconds(config_.handshake_timeout)));
  ASSIGN_OR_RETURN(guard_, ConnectionGuard::Start(ctx_, *router_, &tenants_, std::move(guard)));
  return absl::OkStatus();
}

absl::Status Daemon::BindEndpoints() {
  router_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
  router_->set(zmq::sockopt::linger, 0);
  // Bound the size of one frame a client may make us buffer: the largest page
  // the tiers hold (inline PUT) or a header. libzmq drops a peer that sends
  // a larger frame as soon as it reads the frame's length.
  router_->set(zmq::sockopt::maxmsgsize,
               static_cast<int64_t>(std::max<uint64_t>(store_->MaxPageBytes(), kMaxHeaderBytes)));
  max_message_bytes_ = kMaxHeaderBytes + kMaxKeysPerRequest * store_->MaxPageBytes();
  router_->set(zmq::sockopt::sndhwm, 100000);
  router_->set(zmq::sockopt::rcvhwm, 100000);
  RETURN_IF_ERROR(SecureRouter());
  std::optional<gid_t> group;
  if (!config_.ipc_socket.empty() && !config_.socket_group.empty()) {
    const struct group* g = getgrnam(config_.socket_group.c_str());
    if (g == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat("--socket_group: no group '", config_.socket_group, "'"));
    group = g->gr_gid;
  }
  if (!config_.ipc_socket.empty()) {
    std::string dir = std::filesystem::path(config_.ipc_socket).parent_path();
    if (dir.empty()) dir = ".";
    bool created = false;
    RETURN_IF_ERROR(EnsurePrivateDir(dir, "socket directory", &created));
    // Members of the socket group must reach the socket: search, not list.
    if (created && group) RETURN_IF_ERROR(GiveToGroup(dir, *group, 0710));
    // A stale socket file was removed by ClaimSocketPath in Init; a live
    // one refused the start there.
  }
  std::vector<std::string> wanted;
  if (!config_.ipc_socket.empty()) wanted.push_back(config_.IpcEndpoint());
  if (!config_.tcp_endpoint.empty()) {
    // Bind the numeric address that was validated, never the text.
    ASSIGN_OR_RETURN(TcpEndpoint tcp,
                     ResolveTcpEndpoint(config_.tcp_endpoint, config_.allow_non_loopback_tcp));
    if (tcp.ipv6) router_->set(zmq::sockopt::ipv6, 1);
    wanted.push_back(tcp.bind);
  }
  for (const std::string& ep : wanted) {
    try {
      router_->bind(ep);
    } catch (const zmq::error_t& e) {
      return absl::FailedPreconditionError(absl::StrCat("cannot bind ", ep, ": ", e.what()));
    }
    endpoints_.push_back(router_->get(zmq::sockopt::last_endpoint));
    spdlog::info("listening on {}", endpoints_.back());
  }
  if (!config_.ipc_socket.empty()) ipc_file_ = OwnedSocketFile(config_.ipc_socket);
  if (group) RETURN_IF_ERROR(GiveToGroup(config_.ipc_socket, *group, 0660));
  if (!config_.ipc_socket.empty()) {
    // Beside the ipc socket, with its mode and group: whoever may connect
    // may hand over buffers (buffer_fd_inbox.h).
    BufferFdInboxConfig inbox;
    inbox.path = config_.BufferSocket();
    inbox.group = group;
    ASSIGN_OR_RETURN(fd_inbox_, BufferFdInbox::Start(std::move(inbox)));
    spdlog::info("buffers by file descriptor on {}", fd_inbox_->path());
  }
  completion_endpoint_ = absl::StrCat("inproc://kvtier-completions-", g_daemon_seq++);
  completions_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::pull);
  completions_->set(zmq::sockopt::rcvhwm, 0);
  completions_->bind(completion_endpoint_);
  return absl::OkStatus();
}

absl::Status Daemon::Run(const std::atomic<bool>& stop) {
  // The frontend never does disk I/O (DESIGN.md, "Threads"): the store
  // defers what it would write here, and counts it (forbidden_io) if
  // anything still does.
  tiers::NoDiskIoScope no_disk_io;
#ifdef KVTIER_HAVE_REMOTE
  tiers::remote::NoNetworkIoScope no_network_io;  // the shared cache's work is its threads'
#endif
  // Not zmq::poll. libzmq's poll asks each socket for ZMQ_EVENTS before and
  // after its wait, after a first pass with no timeout, and each such check
  // is a getpid (libzmq's fork check) and a poll of the socket's mailbox;
  // getpid and poll were a quarter of the daemon's samples under single
  // LOOKUPs on the paravirtualized test VM. Here each socket is asked once
  // after a wakeup and once after each message it delivers, and the thread
  // sleeps on the sockets' ZMQ_FDs only when both have said "no message": a
  // ZMQ_EVENTS that finds none leaves each pipe to send an activation command
  // with its next message, and that command makes the ZMQ_FD readable.
  // Measured over all the daemon's threads: 8.2 polls and 11.1 getpids per
  // LOOKUP instead of 10.8 and 12.8 (BENCHMARKS, "the frontend's wait").
  pollfd fds[] = {{router_->get(zmq::sockopt::fd), POLLIN, 0},
                  {completions_->get(zmq::sockopt::fd), POLLIN, 0}};
  const auto has_in = [](zmq::socket_t& s) {
    while (true) {
      try {
        return (s.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  };
  bool router_in = has_in(*router_), completions_in = has_in(*completions_);
  absl::Time next_reap = absl::Now() + absl::Seconds(1);
  absl::Time next_sweep = absl::Now() + kPeerSweep;
  while (!stop.load()) {
    if (!router_in && !completions_in) {
      if (::poll(fds, 2, 100) < 0 && errno != EINTR)
        return absl::InternalError(absl::StrCat("poll failed: ", strerror(errno)));
      completions_in = has_in(*completions_);
      router_in = has_in(*router_);
    }
    // Completions first: they free pins and buffers.
    for (int i = 0; i < 256 && completions_in; ++i) {
      OnCompletion();
      completions_in = has_in(*completions_);
    }
    for (int i = 0; i < 256 && router_in; ++i) {
      OnRouterMessage();
      router_in = has_in(*router_);
    }
    // A socket still busy after its share of the pass: ask the other one
    // again before the next pass, or a flood of requests would keep the
    // copy workers' completions (other tenants' replies) waiting, and the
    // reverse. One check per 256 messages; none when the pass drained both.
    if (router_in && !completions_in) completions_in = has_in(*completions_);
    if (completions_in && !router_in) router_in = has_in(*router_);
    metrics_.sessions.store(sessions_.size(), std::memory_order_relaxed);
    if (absl::Now() >= next_sweep) {
      EndClosedPeers();
      next_sweep = absl::Now() + kPeerSweep;
    }
    if (absl::Now() >= next_reap) {
      sessions_.ReapIdle(absl::Now() - config_.session_idle_timeout);
      PruneBufferOwners();
      next_reap = absl::Now() + absl::Seconds(1);
    }
  }
  spdlog::info("shutting down: draining {} copy workers", engine_->threads());
  StopPrefetch();
  engine_->Shutdown();
  while (has_in(*completions_)) OnCompletion();
  return absl::OkStatus();
}

// Every frame of one multipart message that is ready now.
Daemon::Frames Daemon::RecvMultipart(zmq::socket_t& socket) {
  Frames frames;
  for (;;) {
    zmq::message_t msg;
    if (!socket.recv(msg, zmq::recv_flags::dontwait)) break;
    bool more = msg.more();
    frames.push_back(std::move(msg));
    if (!more) break;
  }
  return frames;
}

void Daemon::OnCompletion() {
  Frames frames = RecvMultipart(*completions_);
  if (IsRedispatch(frames)) {
    // [routing id, marker, keys fetched, the GET's own frames]: its
    // fetches are in the store.
    const std::string routing_id = frames[0].to_string();
    const auto* fetched = static_cast<const PageKey*>(frames[2].data());
    fetched_keys_.insert(fetched, fetched + frames[2].size() / sizeof(PageKey));
    Frames request(std::make_move_iterator(frames.begin() + 3),
                   std::make_move_iterator(frames.end()));
    Dispatch(routing_id, request, /*fetched=*/true);
    fetched_keys_.clear();
    return;
  }
  if (frames.size() >= 2) EndPendingRequest(frames[0], frames[1]);
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    router_->send(frames[i], flags | zmq::send_flags::dontwait);
  }
}

void Daemon::EndClosedPeers() {
  for (const std::string& peer : peers_.TakeClosed()) {
    const size_t n = sessions_.EraseByPeer(peer);
    if (n > 0) spdlog::info("connection closed: ended its {} session(s)", n);
  }
}

// Receives one message frame by frame and keeps it only while it stays within
// what its sender may send: before the peer has a session, one HELLO frame
// of at most 64 KiB; after, a header and one page per key. The rest of an
// oversized message is dropped as it is read, and the sender gets an error.
void Daemon::OnRouterMessage() {
  zmq::message_t id;
  if (!router_->recv(id, zmq::recv_flags::dontwait)) return;
  std::string routing_id = id.to_string();
  if (!id.more()) return;  // no header: nothing to answer
  const bool known = sessions_.HasPeer(routing_id);
  const size_t max_frames = known ? kMaxFramesPerMessage : 1;
  const uint64_t max_bytes = known ? max_message_bytes_ : kMaxHelloBytes;
  Frames frames;
  size_t count = 0;
  uint64_t total = 0;
  int fd = -1;  // the connection's socket, from the first frame off the wire
  std::string user;  // the tenant the handshake authenticated (connection_guard.h)
  for (bool more = true; more;) {
    zmq::message_t msg;
    if (!router_->recv(msg, zmq::recv_flags::dontwait)) break;  // cannot happen: atomic delivery
    if (count == 0) {
      fd = zmq_msg_get(msg.handle(), ZMQ_SRCFD);  // -1 when libzmq cannot tell
      if (const char* u = zmq_msg_gets(msg.handle(), "User-Id")) user = u;
    }
    more = msg.more();
    ++count;
    total += msg.size();
    if (count <= max_frames && total <= max_bytes) frames.push_back(std::move(msg));
    else if (frames.size() > 1) frames.resize(1);  // keep the header for its request id
  }
  if (count > max_frames || total > max_bytes) {
    RefuseOversized(routing_id, frames, count, total, known);
    return;
  }
  from_ = Origin{std::move(user), ConnectionOf(fd), true, fd};
  Dispatch(routing_id, frames);
  from_ = Origin{};
  if (sessions_.HasPeer(routing_id)) peers_.Note(routing_id, fd);
}

void Daemon::RefuseOversized(const std::string& routing_id, Frames& frames, size_t count,
                             uint64_t total, bool known) {
  ++requests_;
  ++request_errors_;
  uint64_t request_id = 0;
  wire::Request header;
  if (!frames.empty() && frames[0].size() <= kMaxHeaderBytes &&
      header.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())))
    request_id = header.request_id();
  const absl::Status status = absl::ResourceExhaustedError(
      known ? absl::StrCat("message of ", count, " frames and ", total, " bytes exceeds the limit of ",
                           kMaxFramesPerMessage, " frames (a header and one page per key)")
            : absl::StrCat("message of ", count, " frames and ", total,
                           " bytes from a peer without a session; send HELLO first (one frame "
                           "of at most ", kMaxHelloBytes, " bytes)"));
  SendReply(routing_id, Reply{ErrorResponse(request_id, status), {}});
}

void Daemon::Dispatch(const std::string& routing_id, Frames& frames, bool fetched) {
  if (!fetched) ++requests_;
  const int64_t start_ns = MonotonicNanos();
  replied_ = false;
  std::vector<absl::string_view> views;
  views.reserve(frames.size());
  for (auto& f : frames) views.emplace_back(static_cast<const char*>(f.data()), f.size());
  uint64_t request_id = 0;
  auto decoded = DecodeRequest(views, &request_id);
  const int type = decoded.ok() ? static_cast<int>(decoded->request.body_case()) : 0;
  fetched_ = fetched;
  absl::Status status = decoded.ok() ? Route(routing_id, *decoded, frames) : decoded.status();
  fetched_ = false;
  if (!status.ok()) {
    ++request_errors_;
    spdlog::debug("request {} failed: {}", request_id, LogSafe(status.ToString(), 512));
    SendReply(routing_id, Reply{ErrorResponse(request_id, status), {}});
  }
  // A dispatch after a fetch was counted, and its time started, the first
  // time: an inline reply now ends the pending request.
  if (fetched) {
    if (replied_) EndPendingRequest(routing_id, request_id, !status.ok());
    return;
  }
  EndRequest(routing_id, request_id, type, start_ns, !status.ok());
}

absl::Status Daemon::Route(const std::string& routing_id, DecodedRequest& d, Frames& frames) {
  const wire::Request& r = d.request;
  absl::StatusOr<Reply> reply;
  if (r.body_case() == wire::Request::kHello) {
    reply = HandleHello(routing_id, d);
  } else {
    Session* s = sessions_.Find(r.session_id(), routing_id);
    if (s == nullptr)
      return absl::UnauthenticatedError(absl::StrCat(
          RequestName(r), ": unknown or expired session; send HELLO first"));
    // A message fresh off the wire must come over the session's own
    // connection, authenticated as its tenant (a re-dispatch after a fetch
    // was checked when it arrived).
    if (from_.wire && (from_.connection != s->connection || from_.user != s->tenant->name))
      return absl::PermissionDeniedError(absl::StrCat(
          RequestName(r), ": this session belongs to another connection (sessions are bound to "
          "the connection that opened them; send HELLO on this one)"));
    s->last_seen = absl::Now();
    switch (r.body_case()) {
      case wire::Request::kRegisterBuffer: reply = HandleRegister(*s, d); break;
      case wire::Request::kUnregisterBuffer: reply = HandleUnregister(*s, d); break;
      case wire::Request::kLookup: return SubmitLookup(*s, d, routing_id);
      case wire::Request::kDelete: return SubmitDelete(*s, d, routing_id);
      case wire::Request::kStats: reply = HandleStats(*s, d); break;
      case wire::Request::kPrefetch: reply = HandlePrefetch(*s, d); break;
      case wire::Request::kGet:
        if (!fetched_ && StartSharedFetch(*s, d, routing_id, frames)) return absl::OkStatus();
        if (r.get().buffer_id() == 0) return SubmitGetInline(*s, d, routing_id);
        return SubmitGet(*s, d, routing_id);
      case wire::Request::kPut: return SubmitPut(*s, d, frames, routing_id);
      case wire::Request::kPing: reply = HandlePing(*s); break;
      case wire::Request::kTenants: reply = HandleTenants(*s); break;
      case wire::Request::kEvict: return SubmitEvict(*s, d, routing_id);
      case wire::Request::kFlush: return SubmitFlush(*s, d, routing_id);
      case wire::Request::kBye:
        sessions_.Erase(r.session_id());
        if (!sessions_.HasPeer(routing_id)) peers_.Forget(routing_id);
        reply = Reply{};
        reply->response.mutable_bye();
        break;
      default: return absl::InvalidArgumentError("unknown request type");
    }
  }
  if (!reply.ok()) return reply.status();
  reply->response.set_version(kProtocolVersion);
  reply->response.set_request_id(r.request_id());
  reply->response.set_code(wire::OK);
  SendReply(routing_id, *std::move(reply));
  return absl::OkStatus();
}

Daemon::Frames Daemon::ReplyFrames(const std::string& routing_id, Reply reply) {
  Frames frames;
  frames.reserve(2 + reply.payloads.size());
  frames.emplace_back(routing_id.data(), routing_id.size());
  std::string header = reply.response.SerializeAsString();
  frames.emplace_back(header.data(), header.size());
  for (auto& p : reply.payloads) frames.push_back(std::move(p));
  return frames;
}

void Daemon::SendReply(const std::string& routing_id, Reply reply) {
  replied_ = true;
  Frames frames = ReplyFrames(routing_id, std::move(reply));
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    // A vanished peer is not an error: ROUTER drops what it cannot route.
    router_->send(frames[i], flags | zmq::send_flags::dontwait);
  }
}

}  // namespace kvtier::daemon
