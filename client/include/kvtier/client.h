// kvtier::Client — the C++ client of kvtierd. It hides the wire format:
// connect and open a session, register a shared-memory buffer, then
// LOOKUP / GET / PUT / DELETE pages by prefix key, and read STATS.
//
// Thread-safety: a Client is NOT thread-safe; use one per thread (each is one
// session over its own ZeroMQ socket). Every call blocks until the daemon
// replies or `timeout` passes. Errors are absl::Status carrying the daemon's
// own message (prefixed "kvtierd: "), or Unavailable when no daemon answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "kvtier/paths.h"
#include "kvtier/stats.h"

namespace kvtier::internal {
class WireAccess;  // our tools' and tests' way to the full wire replies
}

namespace kvtier {

class ShmBuffer;

enum class TierKind : uint8_t { kNone = 0, kHbm = 1, kHost = 2, kNvme = 3, kRemote = 4 };
absl::string_view TierKindName(TierKind t);

struct ClientOptions {
  std::string endpoint;          // empty: DefaultEndpoint() (kvtier/paths.h)
  // The connection authenticates in the ZeroMQ handshake: PLAIN with tenant
  // and token, or CURVE (the keys below). docs/PROTOCOL.md, "Connecting".
  std::string tenant = "default";
  std::string token;
  std::optional<Layout> layout;  // required for GET/PUT; not for LOOKUP/STATS
  std::string client_name;       // shows up in the daemon's log
  std::chrono::milliseconds timeout{10000};
  // CURVE instead of PLAIN when curve_server_key is set: the daemon's public
  // key, and the tenant's own pair (its public half is the tenant's
  // curve_public_key in the tenants file), all Z85. Last, so aggregate
  // initialisation of the fields above keeps working.
  std::string curve_server_key, curve_public_key, curve_secret_key;
};

struct LookupResult {
  uint32_t hits = 0;             // leading keys present
  std::vector<TierKind> tiers;   // tier of each hit
  uint32_t prefetching = 0;      // NVMe hits the daemon started promoting (lookahead)
  // With LookupOptions::lease: how many of the hits are pinned for this
  // session's tenant; fewer than `hits` only for pages the tenant already
  // held leased for the longest lease (30 s) lately (docs/PROTOCOL.md,
  // "Lifetime bound"): present, but not held.
  uint32_t leased = 0;
};

struct LookupOptions {
  // > 0: the daemon pins the leading hits for this long (or until a GET
  // reads them), so a page counted now cannot be evicted before it is
  // loaded; `hits` then counts only pages it could pin (a tenant's share of
  // the pinned budget is capped), and pages past the lease lifetime bound,
  // unpinned (see LookupResult::leased). 0: a plain LOOKUP, whose hits may
  // be gone by the GET.
  std::chrono::milliseconds lease{0};
};

// What became of one page of a PUT (PutReply.page_status).
enum class PutPageStatus : uint8_t {
  kStored = 0,
  kDeduplicated = 1,     // already present
  kNoRoom = 2,           // no room or quota, or the chain was cut before it
  kNotDurable = 3,       // its durable copy failed
  kOtherPutFailed = 4,   // another PUT of it, at the same time, did not store it
};

struct PutResult {
  uint32_t stored = 0;
  uint32_t deduplicated = 0;
  uint32_t not_stored = 0;       // pages not stored, anywhere in the chain (see pages)
  std::string not_stored_reason; // the daemon's reason, when not_stored > 0
  // Per key, in order. Empty from a daemon older than per-page status.
  std::vector<PutPageStatus> pages;
  // Leading keys stored or deduplicated: the prefix a later GET can find.
  // (From an older daemon: stored + deduplicated when nothing failed, else 0.)
  uint32_t leading_kept = 0;
};

using BufferId = uint32_t;

// What a GET does with pages that are not in RAM (docs/PROTOCOL.md, "Prefetch").
enum class GetPolicy : uint8_t {
  kWaitComplete = 0,  // read every present page, from any tier (default)
  kBestEffort = 1,    // only pages in RAM now; the rest come back kNone (and get promoted)
  kTimeout = 2,       // wait up to `timeout` for their promotion, then best effort
};
// One run of a scattered page (docs/PROTOCOL.md, "Scattered pages"): the
// page's next `length` bytes lie at the key's offset + `buffer_offset`.
// Runs are given in page order and cover the page exactly; every key of a
// request is cut the same way (e.g. an engine's K and V block of each layer).
struct PageRun {
  uint64_t length = 0;
  uint64_t buffer_offset = 0;
};
struct GetOptions {
  GetPolicy policy = GetPolicy::kWaitComplete;
  std::chrono::milliseconds timeout{0};  // kTimeout only
  std::vector<PageRun> page_runs;        // empty: each page whole at its offset
};
struct PutOptions {
  std::vector<PageRun> page_runs;  // empty: each page whole at its offset
};

// A PREFETCH hint: promote these pages to `target` soon.
struct PrefetchOptions {
  TierKind target = TierKind::kHost;      // the daemon prefetches into host
  int32_t priority = 0;                   // larger first
  std::chrono::milliseconds deadline{0};  // not started by then: dropped; 0 = none
  std::chrono::milliseconds lease{0};     // pinned this long awaiting the GET; 0 = daemon default
};
struct PrefetchResult {
  uint32_t queued = 0;    // promotions started
  uint32_t merged = 0;    // already queued, running or promoted and waiting
  uint32_t resident = 0;  // already in the target tier (or above)
  uint32_t missing = 0;   // not in the store
  uint32_t rejected = 0;  // the daemon's prefetch queue is full
};

// Layer-wise GET: called with layer l once layer l of every page the GET
// will report as a hit is in the buffer (layers arrive in order 0, 1, ...).
using LayerCallback = std::function<void(uint32_t layer)>;

// What a device buffer registration maps (values match kvtier.wire.BufferKind).
enum class DeviceBufferKind : uint8_t { kCudaIpc = 1, kEmulated = 2 };

class Client {
 public:
  // Connects and sends HELLO. Unauthenticated on a bad tenant/token,
  // Unavailable when no daemon answers within the timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  // sends BYE (best effort)
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& namespace_name() const { return namespace_; }
  uint64_t page_bytes() const { return page_bytes_; }
  uint64_t layout_id() const { return layout_id_; }

  // Registers the first `size` bytes of `buffer` (all of it when 0): by
  // handing its file descriptor to the daemon where the daemon takes fds
  // (HELLO named a buffer socket), which works whatever user the daemon
  // runs as and keeps the buffer private to its owner; otherwise, or when
  // that socket cannot be reached from here, by name. The caller keeps the
  // buffer alive while it is registered.
  absl::StatusOr<BufferId> RegisterBuffer(const ShmBuffer& buffer, uint64_t size = 0);
  // Registers `size` bytes of the memory object open as `fd` (POSIX shm,
  // memfd or hugetlbfs) by handing the fd to the daemon (docs/PROTOCOL.md,
  // "Buffers by file descriptor"); `label` names it in errors. The daemon
  // keeps its own reference: the caller may close `fd` afterwards.
  absl::StatusOr<BufferId> RegisterBufferFd(int fd, uint64_t size, const std::string& label = "");
  // Asks the daemon to open and map the shm object `shm_name` ("/name") of
  // `size` bytes by name: the daemon's user must be able to open it.
  absl::StatusOr<BufferId> RegisterBuffer(const std::string& shm_name, uint64_t size);
  // Whether the daemon takes buffers by fd (its HELLO named a buffer socket).
  bool takes_buffer_fds() const;
  // Asks the daemon to map GPU memory of `size` bytes: `handle` is a
  // cudaIpcMemHandle_t's bytes (kCudaIpc) or the emulated device's shm name
  // (kEmulated). GpuArena::Register calls this; few callers need it directly.
  // The caller keeps the memory allocated while it is registered.
  absl::StatusOr<BufferId> RegisterDeviceBuffer(DeviceBufferKind kind, const std::string& handle,
                                                int device_ordinal, uint64_t size);
  absl::Status UnregisterBuffer(BufferId id);

  // How many leading keys of the chain are cached, and where.
  absl::StatusOr<LookupResult> Lookup(absl::Span<const PageKey> keys);
  // The same, taking a lease on the hits (see LookupOptions).
  absl::StatusOr<LookupResult> Lookup(absl::Span<const PageKey> keys,
                                      const LookupOptions& options);
  // Many chains in one round trip (a scheduler's waiting queue):
  // result[i] answers chains[i] as Lookup(chains[i], options) would — its
  // leading hits, their tiers, its lookahead count and, with a lease,
  // leased == hits (the reply carries no per-chain count: a page past the
  // lease lifetime bound is counted as leased here). Chains are looked up in
  // order, so with a lease a later chain may be cut where earlier ones used
  // up the tenant's share of the lease budget. An
  // empty chain answers hits 0 and is not sent. Up to 4096 chains and 32768
  // keys go in one request (docs/PROTOCOL.md, "Batched LOOKUP"); a longer
  // list goes as several requests, one after another. InvalidArgument (and
  // nothing sent) when a chain has more keys than the daemon's per-request
  // limit (4096); Unimplemented from a daemon that predates batching.
  absl::StatusOr<std::vector<LookupResult>> LookupBatch(
      absl::Span<const absl::Span<const PageKey>> chains, const LookupOptions& options = {});
  absl::StatusOr<std::vector<LookupResult>> LookupBatch(
      absl::Span<const std::vector<PageKey>> chains, const LookupOptions& options = {});

  // Copies present pages into the buffer at offsets[i] (one per key). Returns
  // each key's tier, kNone for a miss (its bytes in the buffer are untouched).
  absl::StatusOr<std::vector<TierKind>> Get(absl::Span<const PageKey> keys, BufferId buffer,
                                            absl::Span<const uint64_t> offsets);
  // The same with a policy for pages not in RAM (best effort, timeout).
  absl::StatusOr<std::vector<TierKind>> Get(absl::Span<const PageKey> keys, BufferId buffer,
                                            absl::Span<const uint64_t> offsets,
                                            const GetOptions& options);
  // Layer-wise GET into a shm buffer: the daemon copies layer 0 of every
  // page, then layer 1, ...; `on_layer(l)` runs on this thread as each layer
  // lands, while later layers are still being copied. `mapping` is the
  // caller's mapping of the registered buffer ({ShmBuffer::data(), size()})
  // and `progress_offset` 8 bytes in it, 8-aligned and outside every page,
  // that the daemon uses as the layer counter. Returns each key's tier.
  absl::StatusOr<std::vector<TierKind>> GetLayers(absl::Span<const PageKey> keys, BufferId buffer,
                                                  absl::Span<const uint64_t> offsets,
                                                  absl::Span<uint8_t> mapping,
                                                  uint64_t progress_offset,
                                                  const LayerCallback& on_layer,
                                                  const GetOptions& options = {});
  // Asks the daemon to promote `keys` (e.g. chains of requests waiting in a
  // queue) before they are read; returns at once.
  absl::StatusOr<PrefetchResult> Prefetch(absl::Span<const PageKey> keys,
                                          const PrefetchOptions& options = {});
  // Copies pages from the buffer into the store. keys[0]'s parent is
  // `parent` (zero for a prompt's first page); keys[i]'s parent is keys[i-1].
  absl::StatusOr<PutResult> Put(absl::Span<const PageKey> keys, const PageKey& parent,
                                BufferId buffer, absl::Span<const uint64_t> offsets);
  // The same for scattered pages (options.page_runs).
  absl::StatusOr<PutResult> Put(absl::Span<const PageKey> keys, const PageKey& parent,
                                BufferId buffer, absl::Span<const uint64_t> offsets,
                                const PutOptions& options);

  // Remote-client forms: page bytes travel inline in the messages.
  // GetInline returns one entry per key, empty for a miss.
  absl::StatusOr<std::vector<std::string>> GetInline(absl::Span<const PageKey> keys);
  absl::StatusOr<PutResult> PutInline(absl::Span<const PageKey> keys, const PageKey& parent,
                                      absl::Span<const absl::string_view> pages);

  absl::StatusOr<uint32_t> Delete(absl::Span<const PageKey> keys);
  // STATS: the daemon, its tiers, the caller's namespace (every namespace
  // and the request latencies for an admin session).
  absl::StatusOr<StatsResult> Stats();

  // Operator requests (docs/PROTOCOL.md, "Operator requests").
  absl::StatusOr<PingResult> Ping();
  // Admin sessions only (PermissionDenied otherwise).
  absl::StatusOr<std::vector<TenantSummary>> Tenants();
  struct EvictResult {
    uint64_t evicted = 0;
    uint64_t remaining = 0;  // the namespace's pages in the store afterwards
  };
  // Evicts up to `pages` (0: all) LRU pages of `namespace_name` (empty: the
  // session's own; another namespace needs an admin session). tier kNone:
  // dropped from the store; else moved out of that tier.
  absl::StatusOr<EvictResult> Evict(const std::string& namespace_name, TierKind tier,
                                    uint64_t pages);
  struct FlushResult {
    uint64_t flushed = 0;
    uint64_t not_flushed = 0;
  };
  // Admin only: demotes every RAM page to the persistent tier.
  absl::StatusOr<FlushResult> Flush();

 private:
  friend class internal::WireAccess;
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string namespace_;
  uint64_t page_bytes_ = 0;
  uint64_t layout_id_ = 0;
};

}  // namespace kvtier
