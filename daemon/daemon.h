// kvtierd's core: the ZeroMQ ROUTER frontend, sessions and request handlers on
// top of the store (tiers::TierManager) and the copy engine.
//
// Threads: Run() is the frontend thread. It polls the ROUTER socket(s) and an
// inproc PULL socket of completions; metadata requests (HELLO, LOOKUP,
// DELETE, STATS, ...) are answered inline; GET/PUT through a registered buffer
// become copy jobs whose replies come back on the completion socket.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/copy_engine.h"
#include "daemon/request_codec.h"
#include "daemon/session.h"
#include "daemon/tenants.h"
#include "tiers/tier_manager.h"
#include "zmq.hpp"

namespace kvtier::daemon {

class Daemon {
 public:
  // Creates the store, maps the host arena, binds the sockets. Errors name
  // the flag or path at fault.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(DaemonConfig config);
  ~Daemon();

  // Serves until `stop` becomes true (checked at least every 100 ms), then
  // drains in-flight copies and closes the sockets.
  absl::Status Run(const std::atomic<bool>& stop);

  // Endpoints actually bound (tcp port resolved when ":0" was asked).
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  using Frames = std::vector<zmq::message_t>;
  struct Reply {
    wire::Response response;
    Frames payloads;
  };

  explicit Daemon(DaemonConfig config);
  absl::Status Init();
  absl::Status BindEndpoints();
  static Frames RecvMultipart(zmq::socket_t& socket);
  void OnRouterMessage();
  void OnCompletion();
  void Dispatch(const std::string& routing_id, Frames& frames);
  absl::Status Route(const std::string& routing_id, DecodedRequest& d, Frames& frames);
  void SendReply(const std::string& routing_id, Reply reply);
  static Frames ReplyFrames(const std::string& routing_id, Reply reply);

  // Handlers: return a reply, or nullopt when a copy job will send it.
  absl::StatusOr<Reply> HandleHello(const std::string& routing_id, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleRegister(Session& s, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleUnregister(Session& s, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleLookup(Session& s, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleDelete(Session& s, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleStats(Session& s, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleGetInline(Session& s, const DecodedRequest& d);
  // Buffer GET and any PUT: submit a copy job that replies via the engine.
  absl::Status SubmitGet(Session& s, const DecodedRequest& d, const std::string& routing_id);
  absl::Status SubmitPut(Session& s, DecodedRequest& d, Frames& frames,
                         const std::string& routing_id);
  absl::StatusOr<std::shared_ptr<ClientBuffer>> FindBuffer(Session& s, uint32_t buffer_id,
                                                           absl::string_view op);
  wire::StatsReply BuildStats(const Session& s) const;

  DaemonConfig config_;
  TenantRegistry tenants_;
  std::unique_ptr<tiers::TierManager> store_;
  zmq::context_t ctx_;
  // One ROUTER bound to every endpoint (ipc and tcp), so completions need
  // only the routing id to find their peer.
  std::unique_ptr<zmq::socket_t> router_;
  std::unique_ptr<zmq::socket_t> completions_;
  std::unique_ptr<CopyEngine> engine_;
  std::vector<std::string> endpoints_;
  SessionTable sessions_;
  absl::flat_hash_map<std::string, tiers::NamespaceId> tenant_ns_;
  // Which namespace holds each mapped shm object (by device and inode): an
  // object registered by one namespace is refused to every other while any
  // registration of it lives.
  struct BufferOwner {
    tiers::NamespaceId ns;
    std::weak_ptr<ClientBuffer> buffer;
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, BufferOwner> buffer_owners_;
  // The frontend thread owns these counters.
  uint64_t requests_ = 0;
  uint64_t request_errors_ = 0;
  absl::Time started_;
  std::string completion_endpoint_;
};

}  // namespace kvtier::daemon
