// Raw DEALER peer for the attack suite; see wire_peer.h.
#include "tests/security/wire_peer.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace kvtier::security {

zmq::context_t& SharedContext() {
  static auto* ctx = new zmq::context_t(1);
  return *ctx;
}

WirePeer::WirePeer(const std::string& endpoint, const std::string& tenant,
                   const std::string& token, const std::string& routing_id)
    : socket_(SharedContext(), zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndtimeo, 20000);
  if (!tenant.empty()) {
    socket_.set(zmq::sockopt::plain_username, tenant);
    socket_.set(zmq::sockopt::plain_password, token.empty() ? std::string("-") : token);
  }
  if (!routing_id.empty()) socket_.set(zmq::sockopt::routing_id, routing_id);
  socket_.connect(endpoint);
}

WirePeer::~WirePeer() { Close(); }

void WirePeer::Close() {
  if (!open_) return;
  open_ = false;
  socket_.close();
}

bool WirePeer::SendFrames(const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    try {
      if (!socket_.send(zmq::buffer(frames[i]), flags)) return false;
    } catch (const zmq::error_t&) {
      return false;
    }
  }
  return true;
}

bool WirePeer::SendSameBuffer(const void* data, size_t bytes, int count) {
  for (int i = 0; i < count; ++i) {
    // No free function: ZeroMQ reads the caller's bytes in place.
    zmq::message_t m(const_cast<void*>(data), bytes, nullptr, nullptr);
    auto flags = i + 1 < count ? zmq::send_flags::sndmore : zmq::send_flags::none;
    try {
      if (!socket_.send(m, flags)) return false;
    } catch (const zmq::error_t&) {
      return false;
    }
  }
  return true;
}

int WirePeer::SendUnfinished(const void* data, size_t bytes, int count) {
  int taken = 0;
  for (; taken < count; ++taken) {
    zmq::message_t m(const_cast<void*>(data), bytes, nullptr, nullptr);
    try {
      if (!socket_.send(m, zmq::send_flags::sndmore)) break;
    } catch (const zmq::error_t&) {
      break;
    }
  }
  return taken;
}

std::optional<std::vector<std::string>> WirePeer::RecvFrames(int timeout_ms) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::nullopt;
  std::vector<std::string> frames;
  for (;;) {
    zmq::message_t m;
    if (!socket_.recv(m, zmq::recv_flags::dontwait)) break;
    frames.push_back(m.to_string());
    if (!m.more()) break;
  }
  return frames;
}

absl::StatusOr<WireReply> WirePeer::CallRaw(const std::vector<std::string>& frames,
                                            int timeout_ms) {
  if (!SendFrames(frames)) return absl::UnavailableError("ZeroMQ refused the request");
  auto got = RecvFrames(timeout_ms);
  if (!got)
    return absl::DeadlineExceededError(absl::StrCat("no reply from kvtierd within ", timeout_ms,
                                                    " ms"));
  WireReply r;
  if (got->empty() || !r.response.ParseFromString((*got)[0]))
    return absl::DataLossError("reply header is not a kvtier.wire.Response");
  r.payloads.assign(got->begin() + 1, got->end());
  return r;
}

absl::StatusOr<WireReply> WirePeer::Call(wire::Request req,
                                         const std::vector<std::string>& payloads,
                                         int timeout_ms) {
  if (req.version() == 0) req.set_version(1);
  if (req.request_id() == 0) req.set_request_id(next_id_++);
  if (!req.has_hello() && req.session_id().empty()) req.set_session_id(session_);
  std::vector<std::string> frames = {req.SerializeAsString()};
  frames.insert(frames.end(), payloads.begin(), payloads.end());
  auto r = CallRaw(frames, timeout_ms);
  if (r.ok() && r->response.request_id() != req.request_id())
    return absl::InternalError(absl::StrCat("reply id ", r->response.request_id(),
                                            " does not echo request id ", req.request_id()));
  return r;
}

absl::StatusOr<WireReply> WirePeer::Hello(const std::string& tenant, const std::string& token,
                                          const std::optional<Layout>& layout,
                                          const std::string& client_name) {
  wire::Request req;
  auto* h = req.mutable_hello();
  h->set_tenant(tenant);
  h->set_token(token);
  h->set_client_name(client_name);
  if (layout) *h->mutable_layout() = ToWire(*layout);
  auto r = Call(req);
  if (r.ok() && r->response.code() == wire::OK) session_ = r->response.hello().session_id();
  return r;
}

wire::Layout ToWire(const Layout& l) {
  wire::Layout w;
  w.set_layers(l.layers);
  w.set_kv_heads(l.kv_heads);
  w.set_head_dim(l.head_dim);
  w.set_tokens_per_page(l.tokens_per_page);
  w.set_dtype(static_cast<wire::Dtype>(l.dtype));
  return w;
}

wire::Request LookupReq(absl::Span<const PageKey> keys) {
  wire::Request r;
  r.mutable_lookup()->set_keys(PackKeys(keys));
  return r;
}

wire::Request GetInlineReq(absl::Span<const PageKey> keys) {
  wire::Request r;
  r.mutable_get()->set_keys(PackKeys(keys));
  return r;
}

wire::Request GetReq(absl::Span<const PageKey> keys, uint32_t buffer,
                     const std::vector<uint64_t>& offsets) {
  wire::Request r = GetInlineReq(keys);
  r.mutable_get()->set_buffer_id(buffer);
  for (uint64_t o : offsets) r.mutable_get()->add_offsets(o);
  return r;
}

wire::Request PutInlineReq(absl::Span<const PageKey> keys, const PageKey& parent) {
  wire::Request r;
  r.mutable_put()->set_keys(PackKeys(keys));
  r.mutable_put()->set_parent(std::string(reinterpret_cast<const char*>(parent.bytes.data()),
                                          kPageKeyBytes));
  return r;
}

wire::Request DeleteReq(absl::Span<const PageKey> keys) {
  wire::Request r;
  r.mutable_delete_()->set_keys(PackKeys(keys));
  return r;
}

wire::Request PrefetchReq(absl::Span<const PageKey> keys, uint32_t lease_ms, int32_t priority) {
  wire::Request r;
  auto* p = r.mutable_prefetch();
  p->set_keys(PackKeys(keys));
  p->set_target(wire::TIER_HOST);
  p->set_priority(priority);
  p->set_lease_ms(lease_ms);
  return r;
}

wire::Request RegisterShmReq(const std::string& name, uint64_t size) {
  wire::Request r;
  r.mutable_register_buffer()->set_shm_name(name);
  r.mutable_register_buffer()->set_size(size);
  return r;
}

wire::Request RegisterDeviceReq(wire::BufferKind kind, const std::string& handle, uint64_t size) {
  wire::Request r;
  auto* b = r.mutable_register_buffer();
  b->set_kind(kind);
  b->set_device_handle(handle);
  b->set_size(size);
  return r;
}

wire::Request UnregisterReq(uint32_t buffer_id) {
  wire::Request r;
  r.mutable_unregister_buffer()->set_buffer_id(buffer_id);
  return r;
}

wire::Request EvictReq(const std::string& ns, wire::Tier tier, uint64_t pages, bool all) {
  wire::Request r;
  auto* e = r.mutable_evict();
  e->set_namespace_(ns);
  e->set_tier(tier);
  e->set_pages(pages);
  e->set_all(all);
  return r;
}

wire::Request StatsReq() {
  wire::Request r;
  r.mutable_stats();
  return r;
}

wire::Request PingReq() {
  wire::Request r;
  r.mutable_ping();
  return r;
}

wire::Request ByeReq() {
  wire::Request r;
  r.mutable_bye();
  return r;
}

wire::Request TenantsReq() {
  wire::Request r;
  r.mutable_tenants();
  return r;
}

wire::Request FlushReq() {
  wire::Request r;
  r.mutable_flush();
  return r;
}

}  // namespace kvtier::security
