// kvtier::Client: request/reply over one ZeroMQ DEALER socket.
#include "kvtier/client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kvtier.pb.h"
#include "kvtier/errors.h"
#include "kvtier/paths.h"
#include "kvtier/shm_buffer.h"
#include "kvtier/status_macros.h"
#include "buffer_handover.h"
#include "client/wire_calls.h"
#include "zmq.hpp"

namespace kvtier {
namespace {

constexpr uint32_t kProtocolVersion = 1;

wire::Layout ToWire(const Layout& l) {
  wire::Layout w;
  w.set_layers(l.layers);
  w.set_kv_heads(l.kv_heads);
  w.set_head_dim(l.head_dim);
  w.set_tokens_per_page(l.tokens_per_page);
  w.set_dtype(static_cast<wire::Dtype>(l.dtype));
  return w;
}

std::vector<TierKind> ToTiers(const std::string& bytes) {
  std::vector<TierKind> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<TierKind>(bytes[i]);
  return out;
}

uint32_t LeaseMs(const LookupOptions& options) {
  return static_cast<uint32_t>(
      std::clamp<int64_t>(options.lease.count(), 0, std::numeric_limits<uint32_t>::max()));
}

// Keys of every chain, one after another, as Lookup.keys wants them: a key
// is its 16 bytes, so a chain is one contiguous run.
static_assert(sizeof(PageKey) == kPageKeyBytes);
void AppendKeys(absl::Span<const PageKey> chain, std::string& out) {
  out.append(reinterpret_cast<const char*>(chain.data()), chain.size() * kPageKeyBytes);
}

absl::Status CheckRunsSupported(bool supported, const std::vector<PageRun>& runs,
                                absl::string_view op) {
  if (runs.empty() || supported) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      op, ": this kvtierd does not support scattered pages (page_runs; its HELLO reply does not "
      "list the feature): upgrade the daemon, or copy pages through a contiguous buffer"));
}

void AddRuns(const std::vector<PageRun>& runs,
             google::protobuf::RepeatedPtrField<wire::PageRun>* out) {
  out->Reserve(static_cast<int>(runs.size()));
  for (const PageRun& r : runs) {
    wire::PageRun* w = out->Add();
    w->set_length(r.length);
    w->set_buffer_offset(r.buffer_offset);
  }
}

}  // namespace

absl::string_view TierKindName(TierKind t) {
  switch (t) {
    case TierKind::kNone: return "none";
    case TierKind::kHbm: return "hbm";
    case TierKind::kHost: return "host";
    case TierKind::kNvme: return "nvme";
    case TierKind::kRemote: return "remote";
  }
  return "?";
}

static PutResult ToPutResult(const wire::PutReply& pr) {
  PutResult out{pr.stored(), pr.deduplicated(), pr.not_stored(), pr.not_stored_reason(), {}, 0};
  for (char c : pr.page_status()) {
    const auto v = static_cast<uint8_t>(c);
    out.pages.push_back(v <= 4 ? static_cast<PutPageStatus>(v) : PutPageStatus::kNoRoom);
  }
  if (!pr.page_status().empty()) out.leading_kept = pr.leading_kept();
  else if (pr.not_stored() == 0) out.leading_kept = pr.stored() + pr.deduplicated();
  return out;
}

// A GET, PUT, DELETE or PREFETCH of no keys does nothing and is answered
// here, without a round trip: a restore-or-compute loop GETs what LOOKUP
// found and PUTs the rest, and on a cold or a fully cached prompt one of
// the two is empty. (The daemon refuses an empty key list on the wire.)
static absl::Status NoKeys(const char* op, size_t offsets) {
  if (offsets == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", offsets, " offsets for 0 keys"));
}

struct Client::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t socket{ctx, zmq::socket_type::dealer};
  std::string endpoint;
  std::string session_id;
  std::string buffer_socket;  // HelloReply.buffer_socket: empty when none
  // HelloReply.features has "page_runs": scattered pages are understood (a
  // daemon without it would ignore them and copy whole pages).
  bool page_runs = false;
  // HelloReply.features has "deadline": buffer GETs and PUTs carry one, so
  // the daemon touches no client memory after this client gave up a call.
  bool deadline = false;
  // A buffer transfer's deadline_ns (CLOCK_MONOTONIC, which steady_clock is
  // on Linux): a tenth of the timeout before this client stops waiting, so a
  // copy the daemon started in time has ended when the call returns.
  uint64_t DeadlineNs() const {
    if (!deadline) return 0;
    const auto at = std::chrono::steady_clock::now() + timeout * 9 / 10;
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count());
  }
  uint64_t next_id = 1;
  std::chrono::milliseconds timeout{10000};
  // Longest chain one LOOKUP may carry (HelloReply.max_keys_per_request).
  uint32_t max_chain_keys = 4096;
  // Batched LOOKUP keys are packed here and swapped into the request, so the
  // buffer (up to 512 KiB) keeps its capacity from one scheduler step to the
  // next instead of being allocated and faulted in again each time.
  std::string batch_keys;

  struct Result {
    wire::Response response;
    std::vector<zmq::message_t> payloads;
  };

  // Sends one request and waits for the reply with the same id. Replies to
  // earlier, timed-out requests are skipped.
  // `tick`, when set, runs about every 50 us while the reply is awaited
  // (layer-wise GET polls its progress counter there).
  absl::StatusOr<Result> Call(wire::Request& req, absl::Span<const absl::string_view> payloads = {},
                              const std::function<void()>& tick = nullptr) {
    req.set_version(kProtocolVersion);
    req.set_request_id(next_id++);
    req.set_session_id(session_id);
    // Serialized straight into the message ZeroMQ sends: one copy of a
    // (batched LOOKUP: up to 512 KiB) header, not two.
    zmq::message_t header(req.ByteSizeLong());
    req.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(header.data()));
    auto more = payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    if (!socket.send(header, more | zmq::send_flags::dontwait))
      return absl::UnavailableError(absl::StrCat("cannot send to kvtierd at ", endpoint));
    for (size_t i = 0; i < payloads.size(); ++i) {
      auto f = i + 1 < payloads.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      socket.send(zmq::message_t(payloads[i].data(), payloads[i].size()), f);
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      zmq::pollitem_t items[2] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                  {handshake ? handshake->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      const int n = handshake ? 2 : 1;
      if (left.count() > 0 && tick && zmq::poll(items, 1, std::chrono::milliseconds(0)) == 0) {
        tick();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      if (left.count() <= 0 || (!tick && zmq::poll(items, n, left) == 0))
        return absl::UnavailableError(absl::StrCat("no reply from kvtierd at ", endpoint,
                                                   " within ", timeout.count(), " ms"));
      if (n == 2 && (items[1].revents & ZMQ_POLLIN)) {
        RETURN_IF_ERROR(HandshakeEvent());
        continue;
      }
      if (!tick && !(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> frames;
      for (;;) {
        zmq::message_t m;
        if (!socket.recv(m)) break;
        bool has_more = m.more();
        frames.push_back(std::move(m));
        if (!has_more) break;
      }
      Result r;
      if (frames.empty() || !r.response.ParseFromArray(frames[0].data(), int(frames[0].size())))
        return absl::DataLossError("kvtierd sent a malformed reply");
      if (r.response.request_id() != req.request_id() && r.response.request_id() != 0) continue;
      if (r.response.code() != wire::OK)
        return MakeStatus(static_cast<ErrorCode>(r.response.code()),
                          absl::StrCat("kvtierd: ", r.response.message()));
      for (size_t i = 1; i < frames.size(); ++i) r.payloads.push_back(std::move(frames[i]));
      return r;
    }
  }

  // While HELLO waits for its reply: the socket's handshake failures
  // (zmq_socket_monitor), so a refused tenant or token is an error at once,
  // not a timeout. Null after HELLO.
  std::unique_ptr<zmq::socket_t> handshake;
  absl::Status HandshakeEvent() {
    zmq::message_t event, address;
    if (!handshake->recv(event, zmq::recv_flags::dontwait)) return absl::OkStatus();
    if (event.more()) (void)handshake->recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) return absl::OkStatus();
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      return absl::UnauthenticatedError(absl::StrCat(
          "kvtierd: unknown tenant or bad token (or a CURVE key no tenant has): ", endpoint,
          " refused the handshake (status ", value, ")"));
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
      return absl::FailedPreconditionError(absl::StrCat(
          "handshake with kvtierd at ", endpoint, " failed (ZMTP protocol error 0x",
          absl::Hex(value), "): the daemon and this client use different security "
          "mechanisms (the daemon runs CURVE when it has --curve_secret_key_file: set "
          "curve_server_key), or it is not a kvtierd"));
    return absl::OkStatus();
  }

  // One batched LOOKUP of chains[which[0]], chains[which[1]], ... (all
  // non-empty, within the batch limits); fills out[which[j]].
  absl::Status LookupChains(absl::Span<const absl::Span<const PageKey>> chains,
                            absl::Span<const uint32_t> which, size_t keys,
                            const LookupOptions& options, std::vector<LookupResult>& out) {
    wire::Request req;
    auto* l = req.mutable_lookup();
    batch_keys.clear();
    batch_keys.reserve(keys * kPageKeyBytes);
    l->mutable_chain_lengths()->Reserve(static_cast<int>(which.size()));
    for (uint32_t i : which) {
      AppendKeys(chains[i], batch_keys);
      l->add_chain_lengths(static_cast<uint32_t>(chains[i].size()));
    }
    l->set_lease_ms(LeaseMs(options));
    l->mutable_keys()->swap(batch_keys);
    absl::StatusOr<Result> reply = Call(req);
    l->mutable_keys()->swap(batch_keys);  // the buffer comes back for the next batch
    ASSIGN_OR_RETURN(auto r, std::move(reply));
    const wire::LookupReply& lr = r.response.lookup();
    if (static_cast<size_t>(lr.chain_hits_size()) != which.size())
      return absl::UnimplementedError(absl::StrCat(
          "kvtierd at ", endpoint, " answered a batched LOOKUP of ", which.size(),
          " chains with ", lr.chain_hits_size(), " chain results: it predates batched LOOKUP"));
    const bool has_prefetching = lr.chain_prefetching_size() == lr.chain_hits_size();
    size_t at = 0;
    for (size_t j = 0; j < which.size(); ++j) {
      const uint32_t hits = lr.chain_hits(static_cast<int>(j));
      if (hits > chains[which[j]].size() || lr.tiers().size() - at < hits)
        return absl::DataLossError("kvtierd sent a malformed batched LOOKUP reply");
      LookupResult& o = out[which[j]];
      o.hits = hits;
      o.tiers.resize(hits);
      for (uint32_t k = 0; k < hits; ++k) o.tiers[k] = static_cast<TierKind>(lr.tiers()[at + k]);
      at += hits;
      o.prefetching = has_prefetching ? lr.chain_prefetching(static_cast<int>(j)) : 0;
      o.leased = options.lease.count() > 0 ? hits : 0;
    }
    return absl::OkStatus();
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (!impl_ || impl_->session_id.empty()) return;
  wire::Request req;
  req.mutable_bye();
  impl_->timeout = std::chrono::milliseconds(500);
  (void)impl_->Call(req);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->endpoint = options.endpoint.empty() ? DefaultEndpoint() : options.endpoint;
  impl->timeout = options.timeout;
  impl->socket.set(zmq::sockopt::linger, 0);
  // The daemon authenticates the connection in the ZeroMQ handshake
  // (docs/PROTOCOL.md, "Connecting"): CURVE when the daemon has a key, else
  // PLAIN with the tenant and its token.
  if (!options.curve_server_key.empty()) {
    if (options.curve_public_key.empty() || options.curve_secret_key.empty())
      return absl::InvalidArgumentError(
          "curve_server_key needs curve_public_key and curve_secret_key (the tenant's pair)");
    try {
      impl->socket.set(zmq::sockopt::curve_serverkey, options.curve_server_key);
      impl->socket.set(zmq::sockopt::curve_publickey, options.curve_public_key);
      impl->socket.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
    } catch (const zmq::error_t& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("CURVE keys must be Z85 (40 characters): ", e.what()));
    }
  } else {
    if (options.tenant.empty() || options.tenant.size() > 255 || options.token.size() > 255)
      return absl::InvalidArgumentError("tenant must be 1 to 255 bytes, token at most 255");
    impl->socket.set(zmq::sockopt::plain_username, options.tenant);
    // PLAIN cannot carry an empty password; the built-in tenant "default"
    // (no tenants file) has no token and accepts any.
    impl->socket.set(zmq::sockopt::plain_password,
                     options.token.empty() ? std::string("-") : options.token);
  }
  static std::atomic<uint64_t> monitors{0};
  const std::string monitor_ep = absl::StrCat("inproc://kvtier-client-handshake-", monitors++);
  if (zmq_socket_monitor(impl->socket.handle(), monitor_ep.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) ==
      0) {
    impl->handshake = std::make_unique<zmq::socket_t>(impl->ctx, zmq::socket_type::pair);
    impl->handshake->set(zmq::sockopt::linger, 0);
    impl->handshake->connect(monitor_ep);
  }
  try {
    impl->socket.connect(impl->endpoint);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot connect to ", impl->endpoint, ": ", e.what()));
  }
  wire::Request req;
  auto* hello = req.mutable_hello();
  hello->set_tenant(options.tenant);
  hello->set_client_name(options.client_name);
  if (options.layout) *hello->mutable_layout() = ToWire(*options.layout);
  absl::StatusOr<Impl::Result> hello_reply = impl->Call(req);
  if (impl->handshake) {
    zmq_socket_monitor(impl->socket.handle(), nullptr, 0);
    impl->handshake.reset();
  }
  ASSIGN_OR_RETURN(auto r, std::move(hello_reply));
  std::unique_ptr<Client> c(new Client(std::move(impl)));
  c->impl_->session_id = r.response.hello().session_id();
  c->namespace_ = r.response.hello().namespace_();
  c->page_bytes_ = r.response.hello().page_bytes();
  c->layout_id_ = r.response.hello().layout_id();
  c->impl_->buffer_socket = r.response.hello().buffer_socket();
  for (const std::string& f : r.response.hello().features())
    if (f == "page_runs") c->impl_->page_runs = true;
    else if (f == "deadline") c->impl_->deadline = true;
  if (uint32_t m = r.response.hello().max_keys_per_request(); m > 0) c->impl_->max_chain_keys = m;
  return c;
}

absl::StatusOr<BufferId> Client::RegisterBuffer(const std::string& shm_name, uint64_t size) {
  wire::Request req;
  req.mutable_register_buffer()->set_shm_name(shm_name);
  req.mutable_register_buffer()->set_size(size);
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return r.response.register_buffer().buffer_id();
}

bool Client::takes_buffer_fds() const { return !impl_->buffer_socket.empty(); }

absl::StatusOr<BufferId> Client::RegisterBufferFd(int fd, uint64_t size, const std::string& label) {
  if (impl_->buffer_socket.empty())
    return absl::FailedPreconditionError(
        "kvtierd takes no buffers by fd here (its HELLO named no buffer socket: it listens on "
        "tcp only, or is older than 0.2); register the buffer by name");
  ASSIGN_OR_RETURN(std::string ticket,
                   client_internal::HandOverFd(impl_->buffer_socket, fd, impl_->timeout));
  wire::Request req;
  req.mutable_register_buffer()->set_shm_name(label);
  req.mutable_register_buffer()->set_size(size);
  req.mutable_register_buffer()->set_fd_ticket(ticket);
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return r.response.register_buffer().buffer_id();
}

absl::StatusOr<BufferId> Client::RegisterBuffer(const ShmBuffer& buffer, uint64_t size) {
  if (size == 0) size = buffer.size();
  if (buffer.name().empty() && !takes_buffer_fds())
    return absl::FailedPreconditionError(
        "this buffer has no shm name (a hugetlb memfd): it can only be registered by descriptor, "
        "and this daemon has no buffer socket (a tcp endpoint); create it with HugePages::kOff");
  if (!takes_buffer_fds() || buffer.fd() < 0) return RegisterBuffer(buffer.name(), size);
  absl::StatusOr<BufferId> id =
      RegisterBufferFd(buffer.fd(), size, buffer.name().empty() ? "hugetlb memfd" : buffer.name());
  // Unreachable (e.g. another mount namespace than the daemon's): the name
  // may still work. Any other answer is the daemon's and stands.
  if (!absl::IsUnavailable(id.status()) || buffer.name().empty()) return id;
  absl::StatusOr<BufferId> by_name = RegisterBuffer(buffer.name(), size);
  if (by_name.ok()) return by_name;
  return absl::Status(by_name.status().code(),
                      absl::StrCat(by_name.status().message(), " (and by fd: ",
                                   id.status().message(), ")"));
}

absl::StatusOr<BufferId> Client::RegisterDeviceBuffer(DeviceBufferKind kind,
                                                      const std::string& handle,
                                                      int device_ordinal, uint64_t size) {
  wire::Request req;
  auto* r = req.mutable_register_buffer();
  r->set_kind(static_cast<wire::BufferKind>(kind));
  r->set_device_handle(handle);
  r->set_device_ordinal(device_ordinal);
  r->set_size(size);
  ASSIGN_OR_RETURN(auto reply, impl_->Call(req));
  return reply.response.register_buffer().buffer_id();
}

absl::Status Client::UnregisterBuffer(BufferId id) {
  wire::Request req;
  req.mutable_unregister_buffer()->set_buffer_id(id);
  return impl_->Call(req).status();
}

absl::StatusOr<LookupResult> Client::Lookup(absl::Span<const PageKey> keys) {
  return Lookup(keys, LookupOptions{});
}

absl::StatusOr<LookupResult> Client::Lookup(absl::Span<const PageKey> keys,
                                            const LookupOptions& options) {
  wire::Request req;
  req.mutable_lookup()->set_keys(PackKeys(keys));
  req.mutable_lookup()->set_lease_ms(LeaseMs(options));
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  LookupResult out;
  out.hits = r.response.lookup().hits();
  out.tiers = ToTiers(r.response.lookup().tiers());
  out.prefetching = r.response.lookup().prefetching();
  out.leased = r.response.lookup().leased();
  return out;
}

// Requests are cut where the next chain would pass either batch limit; the
// per-chain limit is checked up front so a bad list sends nothing.
absl::StatusOr<std::vector<LookupResult>> Client::LookupBatch(
    absl::Span<const absl::Span<const PageKey>> chains, const LookupOptions& options) {
  for (size_t i = 0; i < chains.size(); ++i)
    if (chains[i].size() > impl_->max_chain_keys)
      return absl::InvalidArgumentError(absl::StrCat(
          "LookupBatch: chain ", i, " has ", chains[i].size(), " keys, at most ",
          impl_->max_chain_keys, " per chain"));
  std::vector<LookupResult> out(chains.size());
  std::vector<uint32_t> which;
  which.reserve(std::min<size_t>(chains.size(), wire::LOOKUP_BATCH_MAX_CHAINS));
  size_t keys = 0;
  for (size_t i = 0; i <= chains.size(); ++i) {
    const bool end = i == chains.size();
    if (!end && chains[i].empty()) continue;
    if (!which.empty() && (end || which.size() == wire::LOOKUP_BATCH_MAX_CHAINS ||
                           keys + chains[i].size() > wire::LOOKUP_BATCH_MAX_KEYS)) {
      RETURN_IF_ERROR(impl_->LookupChains(chains, which, keys, options, out));
      which.clear();
      keys = 0;
    }
    if (end) break;
    which.push_back(static_cast<uint32_t>(i));
    keys += chains[i].size();
  }
  return out;
}

absl::StatusOr<std::vector<LookupResult>> Client::LookupBatch(
    absl::Span<const std::vector<PageKey>> chains, const LookupOptions& options) {
  std::vector<absl::Span<const PageKey>> spans(chains.begin(), chains.end());
  return LookupBatch(absl::MakeConstSpan(spans), options);
}

absl::StatusOr<std::vector<TierKind>> Client::Get(absl::Span<const PageKey> keys, BufferId buffer,
                                                  absl::Span<const uint64_t> offsets) {
  if (keys.empty()) {
    RETURN_IF_ERROR(NoKeys("GET", offsets.size()));
    return std::vector<TierKind>{};
  }
  wire::Request req;
  auto* g = req.mutable_get();
  g->set_keys(PackKeys(keys));
  g->set_buffer_id(buffer);
  g->mutable_offsets()->Add(offsets.begin(), offsets.end());
  g->set_deadline_ns(impl_->DeadlineNs());
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return ToTiers(r.response.get().tiers());
}

absl::StatusOr<PutResult> Client::Put(absl::Span<const PageKey> keys, const PageKey& parent,
                                      BufferId buffer, absl::Span<const uint64_t> offsets) {
  return Put(keys, parent, buffer, offsets, PutOptions{});
}

absl::StatusOr<PutResult> Client::Put(absl::Span<const PageKey> keys, const PageKey& parent,
                                      BufferId buffer, absl::Span<const uint64_t> offsets,
                                      const PutOptions& options) {
  if (keys.empty()) {
    RETURN_IF_ERROR(NoKeys("PUT", offsets.size()));
    return PutResult{};
  }
  wire::Request req;
  auto* p = req.mutable_put();
  p->set_keys(PackKeys(keys));
  p->set_parent(std::string(reinterpret_cast<const char*>(parent.bytes.data()), kPageKeyBytes));
  RETURN_IF_ERROR(CheckRunsSupported(impl_->page_runs, options.page_runs, "PUT"));
  p->set_buffer_id(buffer);
  p->mutable_offsets()->Add(offsets.begin(), offsets.end());
  AddRuns(options.page_runs, p->mutable_page_runs());
  p->set_deadline_ns(impl_->DeadlineNs());
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return ToPutResult(r.response.put());
}

absl::StatusOr<std::vector<std::string>> Client::GetInline(absl::Span<const PageKey> keys) {
  if (keys.empty()) return std::vector<std::string>{};
  wire::Request req;
  req.mutable_get()->set_keys(PackKeys(keys));
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  std::vector<TierKind> tiers = ToTiers(r.response.get().tiers());
  std::vector<std::string> pages(keys.size());
  size_t next = 0;
  for (size_t i = 0; i < tiers.size() && i < pages.size(); ++i) {
    if (tiers[i] == TierKind::kNone) continue;
    if (next >= r.payloads.size()) return absl::DataLossError("kvtierd: GET reply is missing pages");
    pages[i] = r.payloads[next++].to_string();
  }
  return pages;
}

absl::StatusOr<PutResult> Client::PutInline(absl::Span<const PageKey> keys, const PageKey& parent,
                                            absl::Span<const absl::string_view> pages) {
  if (keys.empty()) {
    RETURN_IF_ERROR(NoKeys("PUT", pages.size()));
    return PutResult{};
  }
  wire::Request req;
  auto* p = req.mutable_put();
  p->set_keys(PackKeys(keys));
  p->set_parent(std::string(reinterpret_cast<const char*>(parent.bytes.data()), kPageKeyBytes));
  ASSIGN_OR_RETURN(auto r, impl_->Call(req, pages));
  return ToPutResult(r.response.put());
}

absl::StatusOr<uint32_t> Client::Delete(absl::Span<const PageKey> keys) {
  if (keys.empty()) return 0u;
  wire::Request req;
  req.mutable_delete_()->set_keys(PackKeys(keys));
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return r.response.delete_().deleted();
}

// The friend through which wire_calls.h reaches a session's request path.
class internal::WireAccess {
 public:
  static absl::StatusOr<wire::Response> Call(Client& c, wire::Request& req) {
    ASSIGN_OR_RETURN(auto r, c.impl_->Call(req));
    return std::move(r.response);
  }
};

absl::StatusOr<wire::StatsReply> WireStats(Client& client) {
  wire::Request req;
  req.mutable_stats();
  ASSIGN_OR_RETURN(wire::Response r, internal::WireAccess::Call(client, req));
  return std::move(*r.mutable_stats());
}

absl::StatusOr<wire::PingReply> WirePing(Client& client) {
  wire::Request req;
  req.mutable_ping();
  ASSIGN_OR_RETURN(wire::Response r, internal::WireAccess::Call(client, req));
  return std::move(*r.mutable_ping());
}

absl::StatusOr<wire::TenantsReply> WireTenants(Client& client) {
  wire::Request req;
  req.mutable_tenants();
  ASSIGN_OR_RETURN(wire::Response r, internal::WireAccess::Call(client, req));
  return std::move(*r.mutable_tenants());
}

absl::StatusOr<StatsResult> Client::Stats() {
  ASSIGN_OR_RETURN(wire::StatsReply r, WireStats(*this));
  return ToStatsResult(r);
}

absl::StatusOr<PingResult> Client::Ping() {
  ASSIGN_OR_RETURN(wire::PingReply r, WirePing(*this));
  return ToPingResult(r);
}

absl::StatusOr<std::vector<TenantSummary>> Client::Tenants() {
  ASSIGN_OR_RETURN(wire::TenantsReply r, WireTenants(*this));
  return ToTenantSummaries(r);
}

absl::StatusOr<Client::EvictResult> Client::Evict(const std::string& namespace_name, TierKind tier,
                                                  uint64_t pages) {
  wire::Request req;
  auto* e = req.mutable_evict();
  e->set_namespace_(namespace_name);
  e->set_tier(static_cast<wire::Tier>(tier));
  if (pages == 0) e->set_all(true);
  else e->set_pages(pages);
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return EvictResult{r.response.evict().evicted(), r.response.evict().remaining()};
}

absl::StatusOr<Client::FlushResult> Client::Flush() {
  wire::Request req;
  req.mutable_flush();
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return FlushResult{r.response.flush().flushed(), r.response.flush().not_flushed()};
}

// --- Prefetch: GET policies, layer-wise GET, PREFETCH ---

namespace {

wire::Get* FillGet(wire::Request& req, absl::Span<const PageKey> keys, BufferId buffer,
                   absl::Span<const uint64_t> offsets, const GetOptions& options,
                   uint64_t deadline_ns) {
  auto* g = req.mutable_get();
  g->set_keys(PackKeys(keys));
  g->set_buffer_id(buffer);
  g->mutable_offsets()->Add(offsets.begin(), offsets.end());
  AddRuns(options.page_runs, g->mutable_page_runs());
  g->set_deadline_ns(deadline_ns);
  g->set_policy(static_cast<wire::GetPolicy>(options.policy));
  if (options.policy == GetPolicy::kTimeout)
    g->set_timeout_ms(static_cast<uint32_t>(std::max<int64_t>(0, options.timeout.count())));
  return g;
}

}  // namespace

absl::StatusOr<std::vector<TierKind>> Client::Get(absl::Span<const PageKey> keys, BufferId buffer,
                                                  absl::Span<const uint64_t> offsets,
                                                  const GetOptions& options) {
  if (keys.empty()) {
    RETURN_IF_ERROR(NoKeys("GET", offsets.size()));
    return std::vector<TierKind>{};
  }
  RETURN_IF_ERROR(CheckRunsSupported(impl_->page_runs, options.page_runs, "GET"));
  wire::Request req;
  FillGet(req, keys, buffer, offsets, options, impl_->DeadlineNs());
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  return ToTiers(r.response.get().tiers());
}

absl::StatusOr<std::vector<TierKind>> Client::GetLayers(
    absl::Span<const PageKey> keys, BufferId buffer, absl::Span<const uint64_t> offsets,
    absl::Span<uint8_t> mapping, uint64_t progress_offset, const LayerCallback& on_layer,
    const GetOptions& options) {
  if (progress_offset % 8 != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "GetLayers: progress_offset ", progress_offset, " must be a multiple of 8"));
  if (mapping.size() < 8 || progress_offset > mapping.size() - 8)
    return absl::OutOfRangeError(absl::StrCat("GetLayers: progress_offset ", progress_offset,
                                              " + 8 lies outside the ", mapping.size(),
                                              "-byte buffer mapping"));
  std::atomic_ref<uint64_t> progress(
      *reinterpret_cast<uint64_t*>(mapping.data() + progress_offset));
  progress.store(0, std::memory_order_relaxed);
  uint32_t delivered = 0;
  auto deliver = [&](uint64_t upto) {
    for (; delivered < upto; ++delivered)
      if (on_layer) on_layer(delivered);
  };
  RETURN_IF_ERROR(CheckRunsSupported(impl_->page_runs, options.page_runs, "GET"));
  wire::Request req;
  wire::Get* g = FillGet(req, keys, buffer, offsets, options, impl_->DeadlineNs());
  g->set_layerwise(true);
  g->set_layer_progress_offset(progress_offset);
  ASSIGN_OR_RETURN(auto r, impl_->Call(req, {}, [&] {
    deliver(progress.load(std::memory_order_acquire));
  }));
  deliver(std::max<uint64_t>(progress.load(std::memory_order_acquire), r.response.get().layers()));
  return ToTiers(r.response.get().tiers());
}

absl::StatusOr<PrefetchResult> Client::Prefetch(absl::Span<const PageKey> keys,
                                                const PrefetchOptions& options) {
  if (keys.empty()) return PrefetchResult{};
  wire::Request req;
  auto* p = req.mutable_prefetch();
  p->set_keys(PackKeys(keys));
  p->set_target(static_cast<wire::Tier>(options.target));
  p->set_priority(options.priority);
  p->set_deadline_ms(static_cast<uint32_t>(std::max<int64_t>(0, options.deadline.count())));
  p->set_lease_ms(static_cast<uint32_t>(std::max<int64_t>(0, options.lease.count())));
  ASSIGN_OR_RETURN(auto r, impl_->Call(req));
  const auto& pr = r.response.prefetch();
  return PrefetchResult{pr.queued(), pr.merged(), pr.resident(), pr.missing(), pr.rejected()};
}

}  // namespace kvtier
