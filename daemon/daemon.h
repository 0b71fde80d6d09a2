// kvtierd's core: the ZeroMQ ROUTER frontend, sessions and request handlers on
// top of the store (tiers::TierManager) and the copy engine.
//
// Threads: Run() is the frontend thread. It polls the ROUTER socket(s) and an
// inproc PULL socket of completions; metadata requests (HELLO, LOOKUP,
// DELETE, STATS, ...) are answered inline; GET/PUT through a registered buffer
// become copy jobs whose replies come back on the completion socket. With a
// shared cache, what must ask the cluster (a LOOKUP's local misses, a GET's
// fetches, a DELETE's records) is answered through the completion socket
// too (shared_handlers.cc): the frontend never waits on the network.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/buffer_fd_inbox.h"
#include "daemon/config.h"
#include "daemon/connection_guard.h"
#include "daemon/copy_engine.h"
#include "daemon/data_path.h"
#include "daemon/device_transfers.h"
#include "daemon/latency.h"
#include "daemon/metrics_http.h"
#include "daemon/peers.h"
#include "daemon/request_codec.h"
#include "daemon/session.h"
#include "daemon/socket_file.h"
#include "daemon/tenants.h"
#include "prefetch/prefetcher.h"
#include "tiers/shared_cache/shared_cache.h"
#include "tiers/store/tier_manager.h"
#include "zmq.hpp"

namespace kvtier::daemon {

struct GetJob;  // a GET from request to reply, on any path (data_path.h)
class CompletionPoster;  // replies from the shared cache's threads (shared_handlers.cc)

class Daemon {
 public:
  // Creates the store, maps the host arena, binds the sockets. Errors name
  // the flag or path at fault.
  // `device` picks the GPU backend and the HBM tier (device_transfers.h).
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(DaemonConfig config,
                                                        DeviceOptions device = {});
  ~Daemon();

  // Serves until `stop` becomes true (checked at least every 100 ms), then
  // drains in-flight copies and closes the sockets.
  absl::Status Run(const std::atomic<bool>& stop);

  // Endpoints actually bound (tcp port resolved when ":0" was asked).
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 public:
  using Frames = std::vector<zmq::message_t>;
  struct Reply {
    wire::Response response;
    Frames payloads;
  };

 private:
  explicit Daemon(DaemonConfig config);
  absl::Status Init();
  // GPU path (device_transfers.cc): the device and, with hbm_bytes > 0, the
  // HBM tier (pushed first: the top tier); pinning the host arena; mapping a
  // client's device buffer at REGISTER_BUFFER.
  absl::Status InitDevice(std::vector<std::unique_ptr<tiers::Tier>>& tiers);
  void PinHostArena(tiers::Tier& host);
  absl::StatusOr<std::shared_ptr<ClientBuffer>> MapDeviceBuffer(const wire::RegisterBuffer& r);
  absl::Status BindEndpoints();
  absl::Status SecureRouter();  // authentication in the handshake (connection_guard.h)
  static Frames RecvMultipart(zmq::socket_t& socket);
  void OnRouterMessage();
  void RefuseOversized(const std::string& routing_id, Frames& frames, size_t count, uint64_t total,
                       bool known);
  // Sessions end when their connection does (peers.h).
  void EndClosedPeers();
  // Drops owner entries of objects no registration holds any more.
  void PruneBufferOwners();
  void OnCompletion();
  // `fetched`: the GET is dispatched again once its shared-cache fetches
  // are in the store (shared_handlers.cc); it is not counted twice.
  void Dispatch(const std::string& routing_id, Frames& frames, bool fetched = false);
  absl::Status Route(const std::string& routing_id, DecodedRequest& d, Frames& frames);
  void SendReply(const std::string& routing_id, Reply reply);
  static Frames ReplyFrames(const std::string& routing_id, Reply reply);

  // Handlers: return a reply, or nullopt when a copy job will send it.
  absl::StatusOr<Reply> HandleHello(const std::string& routing_id, const DecodedRequest& d);
  absl::StatusOr<Reply> HandleRegister(Session& s, const DecodedRequest& d);
  // REGISTER_BUFFER with fd_ticket: the handed-over fd, if this connection's
  // uid is the one that handed it over.
  absl::StatusOr<std::shared_ptr<ClientBuffer>> MapHandedBuffer(const wire::RegisterBuffer& r);
  absl::StatusOr<Reply> HandleUnregister(Session& s, const DecodedRequest& d);
  // LOOKUP: one chain, or with Lookup.chain_lengths many; inline on the
  // frontend (metadata only), unless chains go on in the shared cache: then
  // answered once it has (SubmitLookup).
  struct ChainLookup {
    uint32_t hits = 0;         // leading hits (with a lease: leading pages held)
    uint32_t prefetching = 0;  // of those, queued by the lookahead
    uint32_t leased = 0;       // with a lease: == hits
    std::string tiers;         // the tier of each hit (tiers::TierKind values)
    std::vector<PageKey> ask;  // the keys after the local hits, for the shared cache
  };
  struct LookupPlan {
    uint64_t request_id = 0;
    bool batched = false;
    std::vector<ChainLookup> chains;
  };
  absl::StatusOr<ChainLookup> LookupChain(const Session& s, absl::Span<const PageKey> chain,
                                          uint32_t lease_ms);
  absl::StatusOr<LookupPlan> PlanLookup(const Session& s, const DecodedRequest& d);
  static Reply BuildLookupReply(const LookupPlan& plan);
  absl::Status SubmitLookup(Session& s, const DecodedRequest& d, const std::string& routing_id);
  // The chain a batched LOOKUP is looking up now (frontend thread only).
  std::vector<PageKey> chain_scratch_;
  // By tiers::TierKind value: pages there are below the prefetch target, so
  // a LOOKUP hit there starts the lookahead (set by InitPrefetch).
  std::array<bool, 5> below_prefetch_target_{};  // kNone .. kRemote
  // DELETE: local pages at once; with a shared cache the reply waits for
  // the cluster to forget the tenant's records of the keys.
  absl::Status SubmitDelete(Session& s, const DecodedRequest& d, const std::string& routing_id);
  // A GET with keys missing here and a shared cache: fetches them into
  // ordinary PUT reservations, then dispatches the GET again. False when
  // there is nothing to fetch (the GET goes on now).
  bool StartSharedFetch(Session& s, const DecodedRequest& d, const std::string& routing_id,
                        Frames& frames);
  // The shared cache and the poster of its replies (shared_handlers.cc).
  absl::Status InitSharedCache();
  void StopSharedCache();
  void FillSharedCacheStats(wire::StatsReply* out) const;
  absl::StatusOr<Reply> HandleStats(Session& s, const DecodedRequest& d);
  // Inline GET: answered at once when every page is in RAM, else by a copy
  // job (handlers.cc).
  absl::Status SubmitGetInline(Session& s, const DecodedRequest& d, const std::string& routing_id);
  // Buffer GET and any PUT: submit a copy job that replies via the engine.
  absl::Status SubmitGet(Session& s, const DecodedRequest& d, const std::string& routing_id);
  // Whether GET `t` is copied on the frontend instead of the copy engine:
  // small (config_.frontend_copy_bytes), into host memory, every hit in a
  // RAM tier, so the copy is one short memcpy and no I/O.
  bool CopiesOnFrontend(const GetJob& t) const;
  // The same for a PUT: small, from host memory, every page into a RAM slot
  // with no checksum, write-through copy or publishing to do.
  bool FillsOnFrontend(const PutTransfer& t) const;
  absl::Status SubmitPut(Session& s, DecodedRequest& d, Frames& frames,
                         const std::string& routing_id);
  absl::StatusOr<std::shared_ptr<ClientBuffer>> FindBuffer(Session& s, uint32_t buffer_id,
                                                           absl::string_view op);
  wire::StatsReply BuildStats(const Session& s) const;
  // Prefetch (prefetch_handlers.cc): PREFETCH, LOOKUP lookahead, and GETs
  // with a policy, layer-wise delivery or a promotion in flight.
  absl::Status InitPrefetch();
  void StopPrefetch();
  absl::StatusOr<Reply> HandlePrefetch(Session& s, const DecodedRequest& d);
  uint32_t StartLookahead(const Session& s, absl::Span<const PageKey> keys,
                          const tiers::LookupResult& found);
  bool UsesPrefetchPath(const Session& s, const DecodedRequest& d) const;
  absl::Status SubmitPolicyGet(Session& s, const DecodedRequest& d, const std::string& routing_id);
  void StartPolicyGet(std::shared_ptr<GetJob> job);
  void FillPrefetchStats(wire::StatsReply* out) const;
  // Operator requests (admin_handlers.cc). EVICT and FLUSH may do disk I/O,
  // so they run as copy-engine jobs.
  absl::StatusOr<Reply> HandlePing(Session& s);
  absl::StatusOr<Reply> HandleTenants(Session& s);
  absl::Status SubmitEvict(Session& s, const DecodedRequest& d, const std::string& routing_id);
  absl::Status SubmitFlush(Session& s, const DecodedRequest& d, const std::string& routing_id);
  // Metrics (metrics_daemon.cc): the /metrics endpoint, and request timing
  // from receipt to reply, also for replies that come back from the engine.
  absl::Status StartMetrics();
  std::string RenderMetrics() const;
  void EndRequest(const std::string& routing_id, uint64_t request_id, int type, int64_t start_ns,
                  bool failed);
  void EndPendingRequest(const zmq::message_t& routing_id, const zmq::message_t& header);
  void EndPendingRequest(absl::string_view routing_id, uint64_t request_id, bool failed);

  DaemonConfig config_;
  DeviceOptions device_options_;
  TenantRegistry tenants_;
  // Declared before store_: the HBM tier and device buffers hold it too.
  std::shared_ptr<tiers::hbm::Device> device_;  // null with --hbm_device=none
  std::string device_desc_ = "none";
  void* pinned_host_ = nullptr;  // host arena registered with device_
  // Outlives store_ (the store publishes to it); StopSharedCache ends its
  // callbacks before store_ and the sockets go.
  std::unique_ptr<tiers::SharedCache> shared_;
  std::shared_ptr<CompletionPoster> poster_;
  std::unique_ptr<tiers::TierManager> store_;
  // Holds pins (leases) into store_: shut down and reset before it.
  std::unique_ptr<prefetch::Prefetcher> prefetcher_;
  tiers::HbmTier* hbm_ = nullptr;  // owned by store_; null without an HBM tier
  std::unique_ptr<DataPath> data_;  // GET and PUT over store_, hbm_ and prefetcher_
  zmq::context_t ctx_;
  // One ROUTER bound to every endpoint (ipc and tcp), so completions need
  // only the routing id to find their peer.
  std::unique_ptr<zmq::socket_t> router_;
  // Authenticates router_'s connections in the handshake (ZAP) and bounds
  // unauthenticated ones; stopped before router_ closes.
  std::unique_ptr<ConnectionGuard> guard_;
  std::unique_ptr<zmq::socket_t> completions_;
  std::unique_ptr<CopyEngine> engine_;
  // Maps registered buffers in after REGISTER (holds them weakly).
  std::unique_ptr<BufferWarmer> warmer_;
  // Takes buffers by file descriptor beside the ipc socket (null without one).
  std::unique_ptr<BufferFdInbox> fd_inbox_;
  OwnedSocketFile ipc_file_;  // the ipc socket's file, removed at a clean stop
  std::vector<std::string> endpoints_;
  SessionTable sessions_;
  absl::flat_hash_map<std::string, tiers::NamespaceId> tenant_ns_;
  PeerTable peers_;
  // Largest message a peer with a session may send (set at bind).
  uint64_t max_message_bytes_ = 0;
  // Which namespace holds each mapped object (shm by device and inode, device
  // memory by the identity its backend gives): an object registered by one
  // namespace is refused to every other while any registration of it — in
  // any session of the owner, or a copy still using one — lives.
  struct BufferOwner {
    tiers::NamespaceId ns;
    std::vector<std::weak_ptr<ClientBuffer>> buffers;
    // Forgets registrations that have ended; true when none is left.
    bool DropEnded() {
      std::erase_if(buffers, [](const std::weak_ptr<ClientBuffer>& b) { return b.expired(); });
      return buffers.empty();
    }
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, BufferOwner> buffer_owners_;
  // The frontend thread owns these counters.
  uint64_t requests_ = 0;
  uint64_t request_errors_ = 0;
  absl::Time started_;
  std::string completion_endpoint_;
  // Request metrics are atomics: the metrics thread reads them.
  RequestMetrics metrics_;
  // Where the message being dispatched came from; wire: false for a
  // re-dispatch (after a shared-cache fetch), which was checked on arrival.
  struct Origin {
    std::string user;  // the tenant its connection authenticated as
    ConnectionId connection;
    bool wire = false;
    int fd = -1;  // the connection's socket (ZMQ_SRCFD) while it is dispatched; -1: unknown
  };
  Origin from_;
  bool replied_ = false;  // set by SendReply: the request was answered inline
  bool fetched_ = false;  // the GET being dispatched had its shared-cache fetch
  // Its keys that came from the shared cache: the reply says "remote" for
  // them, where the bytes came from (frontend thread only).
  absl::flat_hash_set<PageKey> fetched_keys_;
  void ReportFetchedAsRemote(absl::Span<const PageKey> keys, std::string& tiers) const;
  struct PendingRequest {
    int type = 0;
    int64_t start_ns = 0;
  };
  // Requests whose reply comes from the copy engine, by routing id + request
  // id (frontend thread only).
  absl::flat_hash_map<std::string, PendingRequest> pending_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
};

}  // namespace kvtier::daemon
