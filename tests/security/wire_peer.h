// The attacker's side of the wire: a raw ZeroMQ DEALER speaking
// kvtier.wire.Request/Response directly (docs/PROTOCOL.md), as an
// independent, hostile client would, with no help from libkvtier-client.
// Not thread-safe: one WirePeer per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier.pb.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "zmq.hpp"

namespace kvtier::security {

struct WireReply {
  wire::Response response;
  std::vector<std::string> payloads;  // inline GET pages
};

// The process-wide ZeroMQ context the peers share (never destroyed, so a
// test that leaks a socket cannot hang the process at exit).
zmq::context_t& SharedContext();

class WirePeer {
 public:
  // Authenticates in the handshake as `tenant` with `token` (PLAIN); an
  // empty tenant sends no credentials at all (the NULL mechanism), which the
  // daemon refuses before any message. `routing_id`: the ZeroMQ routing id
  // to present (empty: libzmq picks one).
  WirePeer(const std::string& endpoint, const std::string& tenant, const std::string& token,
           const std::string& routing_id = "");
  ~WirePeer();
  WirePeer(const WirePeer&) = delete;
  WirePeer& operator=(const WirePeer&) = delete;

  // Frames as given; false when ZeroMQ would not take them.
  bool SendFrames(const std::vector<std::string>& frames);
  // One multipart message of `count` frames, each the same `bytes` at
  // `data`, sent zero-copy (the caller keeps `data` alive until Close()).
  bool SendSameBuffer(const void* data, size_t bytes, int count);
  // As SendSameBuffer, but every frame keeps MORE set: a message that never
  // ends. Returns how many frames ZeroMQ took.
  int SendUnfinished(const void* data, size_t bytes, int count);
  // The next message, or nullopt after `timeout_ms`.
  std::optional<std::vector<std::string>> RecvFrames(int timeout_ms = 5000);
  absl::StatusOr<WireReply> CallRaw(const std::vector<std::string>& frames,
                                    int timeout_ms = 5000);
  // Fills in version 1, a fresh request id and the session (unless set).
  absl::StatusOr<WireReply> Call(wire::Request request,
                                 const std::vector<std::string>& payloads = {},
                                 int timeout_ms = 5000);
  // HELLO; on success the session id is kept for later calls.
  absl::StatusOr<WireReply> Hello(const std::string& tenant, const std::string& token,
                                  const std::optional<Layout>& layout,
                                  const std::string& client_name = "wire-peer");
  // Closes the socket at once (linger 0), without BYE.
  void Close();

  // How long a send may wait for a connection that takes it (20 s).
  void set_send_timeout_ms(int ms) { socket_.set(zmq::sockopt::sndtimeo, ms); }
  const std::string& session() const { return session_; }
  void set_session(std::string s) { session_ = std::move(s); }

 private:
  zmq::socket_t socket_;
  bool open_ = true;
  std::string session_;
  uint64_t next_id_ = 1;
};

wire::Layout ToWire(const Layout& layout);

// Request builders. Keys are packed as the protocol says (n x 16 bytes).
wire::Request LookupReq(absl::Span<const PageKey> keys);
wire::Request GetInlineReq(absl::Span<const PageKey> keys);
wire::Request GetReq(absl::Span<const PageKey> keys, uint32_t buffer,
                     const std::vector<uint64_t>& offsets);
// Inline PUT: the page frames go as payloads of Call().
wire::Request PutInlineReq(absl::Span<const PageKey> keys, const PageKey& parent);
wire::Request DeleteReq(absl::Span<const PageKey> keys);
wire::Request PrefetchReq(absl::Span<const PageKey> keys, uint32_t lease_ms, int32_t priority = 0);
wire::Request RegisterShmReq(const std::string& name, uint64_t size);
wire::Request RegisterDeviceReq(wire::BufferKind kind, const std::string& handle, uint64_t size);
wire::Request UnregisterReq(uint32_t buffer_id);
wire::Request EvictReq(const std::string& ns, wire::Tier tier, uint64_t pages, bool all);
wire::Request StatsReq();
wire::Request PingReq();
wire::Request ByeReq();
wire::Request TenantsReq();
wire::Request FlushReq();

}  // namespace kvtier::security
