// TierManager: the store. Owns the sharded page index keyed by
// (namespace, page key), and on top of the tiers decides placement, keeps LRU
// recency (leaf-first along prefix chains), pins pages that are being read or
// written, deduplicates PUTs, enforces per-namespace quotas and evicts between
// high/low watermarks on its own thread.
//
// Thread-safety: every public method is thread-safe. PagePin and Reservation
// may be destroyed on any thread (e.g. a ZeroMQ I/O thread freeing a
// zero-copy message).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtier/page_key.h"
#include "tiers/shared_cache/shared_cache.h"
#include "tiers/store/eviction_policy.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

using NamespaceId = uint32_t;

struct TierManagerConfig {
  // Background eviction starts above high and stops below low (fractions of
  // each tier's capacity).
  double high_watermark = 0.95;
  double low_watermark = 0.90;
  uint32_t index_shards = 16;    // power of two
  uint32_t eviction_batch = 64;  // pages per evictor pass
  // Eviction prefers leaves: it skips pages with resident children for up to
  // this many LRU candidates before taking a non-leaf.
  uint32_t leaf_scan_limit = 64;
  bool start_evictor_thread = true;
  // A GET served from below the highest host-addressable tier (NVMe, for
  // the host tier) moves the page up into it when it has clean room (it is
  // likely to be read again; its NVMe copy stays); off: pages stay where
  // they are and are read through a bounce buffer.
  bool promote_on_get = true;
  // Which pages a host eviction writes to a persistent tier: all of them, or
  // only pages that were read or PUT again since they were stored (trades hit
  // rate for SSD wear). The rest are dropped and counted.
  enum class Admission { kAll, kReusedOnly };
  Admission persistent_admission = Admission::kAll;
  // With a shared cache (SetSharedCache): which pages leaving the store from
  // its last tier are published to it first (the same choice), unless
  // shared_write_through publishes every PUT's page instead, when it is
  // filled, so other nodes find it at once (evictions are then not
  // published again: the cluster has the page already).
  Admission shared_admission = Admission::kAll;
  bool shared_write_through = false;
  // Write-through: a PUT that lands in RAM also writes a copy to the
  // persistent tier before it is acknowledged, so a restart finds it; the
  // later demotion of that page is then free (its copy is already there).
  // Off (write-back): a page reaches NVMe when RAM evicts it.
  bool write_through = false;
  // Cleaning: once a RAM tier above a persistent tier is fuller than
  // low_watermark - clean_fraction, the evictor keeps its coldest
  // clean_fraction of capacity written back (clean), so requests make room
  // by dropping clean pages, never by writing. 0 turns cleaning off.
  double clean_fraction = 0.10;
  // When the persistent tier needs room, first forget its copies of pages
  // that are also in RAM (more distinct pages cached: +1.4 pp hit rate on
  // the replay of docs/BENCHMARKS.md) — each such page is written again when
  // RAM evicts it (+24% disk writes there). Off: only pages that live on NVMe
  // alone are evicted (LRU, leaf-first); copies go with their page.
  bool reclaim_copies_first = false;
  // AddNamespace refuses a reserve that would bring the sum of all
  // namespaces' reserves in a tier above this fraction of its capacity
  // (the others must still be able to run).
  double max_reserved_fraction = 0.90;
  // The eviction policy of each tier (eviction_policy.h); a tier not named
  // here: LRU. Create refuses a kind the store does not have.
  absl::flat_hash_map<TierKind, EvictionPolicy> eviction;

  absl::Status Validate() const;
};

struct NamespaceConfig {
  std::string name;
  // Per-tier byte quota; a missing tier or 0 means unlimited.
  absl::flat_hash_map<TierKind, uint64_t> quota_bytes;
  // Per-tier reserved share; a missing tier or 0 means none. No other
  // namespace's pressure (its PUTs, promotions, demotions, the evictor)
  // evicts or demotes this namespace's pages out of a tier while that would
  // leave it fewer bytes there than its reserve; its own quota may. At most
  // its quota and the tier's capacity, and all namespaces' reserves in a
  // tier together at most TierManagerConfig::max_reserved_fraction of it.
  // Tiers of a kind the store lacks are ignored (like quotas).
  absl::flat_hash_map<TierKind, uint64_t> reserved_bytes;
};

class TierManager;
class PageReadBatch;  // ReadPages' state, private to page_reads.cc
class LayerReadBatch;  // ReadLayers' state, private to layer_reads.cc
class PutPath;         // the store's side of a PUT, internal/put_path.h
struct PageEntry;  // index entry (page_index.h), private to tiers/

// What Reservation::CommitAll did.
struct CommitResult {
  size_t stored = 0;      // published
  size_t not_stored = 0;  // refused: the durable copy failed (or never filled)
  absl::Status error;     // the first reason, when not_stored > 0
  std::vector<bool> stored_each;  // per reservation, in order: published
};

// A pinned, readable page. While alive the page is never evicted or freed
// (a DELETE detaches it from the index; its slot is freed on the last unpin).
class PagePin {
 public:
  PagePin() = default;
  PagePin(PagePin&& other) noexcept;
  PagePin& operator=(PagePin&& other) noexcept;
  ~PagePin();

  bool valid() const { return entry_ != nullptr; }
  TierKind tier() const;
  uint64_t bytes() const;      // page bytes
  uint64_t checksum() const;   // xxh3-64 of the page once it reached NVMe; 0 before
  const uint8_t* data() const; // nullptr when the tier is not addressable
  // Copies the page into dst (any tier). Counts tier bytes_read.
  absl::Status CopyTo(void* dst) const;
  // For a reader that sends or copies the whole page from data() itself
  // (not through ReadPages, ReadLayers or CopyTo, which count): counts its
  // bytes out of the page's tier. Thread-safe.
  void CountReadOut() const;
  // The page's slot in its tier (for tiers that are not host-addressable,
  // e.g. the HBM tier's device pointer). Stable while pinned.
  Slot slot() const;
  void Reset();
  // A hold (TierManager::HoldForLease) keeps the page in the store but is
  // not a reader: the page may be promoted while it lasts, so data() and
  // slot() are not stable and must not be used through it.
  bool is_hold() const { return hold_; }

 private:
  friend class TierManager;
  friend class PageReadBatch;
  friend class LayerReadBatch;
  // Under the shard lock (the page's size is read there once: a hold does
  // not stop a promotion from switching the entry's slot).
  PagePin(TierManager* mgr, PageEntry* entry, bool hold = false);
  TierManager* mgr_ = nullptr;
  PageEntry* entry_ = nullptr;
  bool hold_ = false;
  uint64_t bytes_ = 0;  // the page's size: the same in every tier
};

// A slot reserved for a PUT, holding the key's in-flight claim: while it
// lives every other Reserve of the key is a dedup. Not visible to LOOKUP/GET
// until Commit(). Destroying it uncommitted frees the slot, the quota it
// held and the claim.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  ~Reservation();

  bool valid() const { return mgr_ != nullptr; }
  TierKind tier() const { return tier_; }
  uint64_t bytes() const { return bytes_; }
  // Writable bytes of the slot, or nullptr for a non-addressable tier.
  uint8_t* data();
  const Slot& slot() const { return slot_; }
  // Whether Fill must see the bytes on the host: the page lands on a
  // persistent tier or keeps a write-through copy (both need its checksum).
  bool NeedsHostBytes() const;
  // For a caller that copied the page into the slot itself (a device DMA
  // into an HBM slot, or into data()): marks it filled.
  // FailedPrecondition when NeedsHostBytes(); use Fill then.
  absl::Status MarkFilled();
  // Copies `bytes()` bytes from src into the slot (one copy; for a
  // persistent tier also the xxh3-64 checksum). Counts tier bytes_written.
  // With shared_write_through, also publishes the page to the shared cache.
  absl::Status Fill(const void* src);
  // Fill for a page fetched from the shared cache: never published back.
  absl::Status FillFetched(const void* src);
  // For a page the shared cache opened straight into data(): marks it
  // filled (never published back). FailedPrecondition where the page needs
  // its bytes on the host for a checksum (NVMe, a write-through copy): use
  // FillFetched then.
  absl::Status MarkFetched();
  // Whether MarkFetched may be used: data() is writable host memory and
  // nothing else needs the bytes.
  bool FetchesInPlace() const;
  // The parent the page's fetched record names (authenticated with it),
  // replacing the one given to Reserve. Before the commit only.
  void SetParent(const PageKey& parent) { parent_ = parent; }
  // Publishes the page (CommitAll of one). True when stored.
  bool Commit();
  // Commits every valid reservation of `rs` with one sync and one index
  // write for all pages that have a durable copy (landed on a persistent
  // tier, or write-through), durable before visible; then publishes them
  // parents first and touches them tail-first (a chain's ancestors end up
  // more recent). A page whose durable copy failed is not stored: counted
  // in not_stored, never as a dedup. Leaves `rs` all empty.
  static CommitResult CommitAll(std::vector<Reservation>& rs);

 private:
  friend class TierManager;
  void Release();  // frees the slots and the claim on the key
  void Publish();
  // The tier and slot of this page's durable copy, or nullptr when it has none.
  Tier* DurableTier(Slot* slot) const;
  // Write-through into the shared cache (shared_write_through).
  void PublishShared(const void* bytes) const;
  absl::Status FillImpl(const void* src, bool publish);
  bool PublishesShared() const;
  TierManager* mgr_ = nullptr;
  NamespaceId ns_ = 0;
  PageKey key_;
  PageKey parent_;
  TierKind tier_ = TierKind::kHost;
  size_t tier_index_ = 0;
  Slot slot_;
  uint64_t bytes_ = 0;
  Slot backup_;              // durable copy in the last (persistent) tier
  bool has_backup_ = false;
  uint64_t checksum_ = 0;
  bool filled_ = false;
};

enum class PutOutcome { kReserved, kDeduplicated };

// The fate of a key another PUT holds reserved: resolved when that PUT
// publishes the page (stored; under write-through, durable) or gives it up.
// A PUT deduplicated against it may only promise the page once it resolves
// stored. Nothing waits for it: a caller leaves a continuation, so no copy
// worker ever blocks on another job (whatever order they run in).
// Thread-safe.
class KeyInFlight {
 public:
  using Done = absl::AnyInvocable<void(bool stored) &&>;
  // Calls `done(stored)` once: at once on this thread when already resolved,
  // else on the thread that resolves it (a copy worker committing the other
  // PUT, or whoever destroys its Reservation), with no lock of the store or
  // of this object held. `done` must not block: queue work, do not wait.
  void OnResolved(Done done) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class PutPath;  // internal/put_path.h: commits and releases claims
  void Resolve(bool stored) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Mutex mu_;
  bool resolved_ ABSL_GUARDED_BY(mu_) = false;
  bool stored_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Done> waiting_ ABSL_GUARDED_BY(mu_);
};

struct ReserveResult {
  PutOutcome outcome = PutOutcome::kReserved;
  Reservation reservation;  // valid iff outcome == kReserved
  // Set when deduplicated against another PUT of the key still in flight.
  std::shared_ptr<KeyInFlight> in_flight;
};

// How a caller may make room in a tier. kCleanOnly never causes disk I/O:
// a RAM page may leave only when it has a durable copy (clean) or moves to
// another RAM tier, and the persistent tier is never evicted from. The
// request path (Reserve) and a GET's promotions use it; the evictor, the
// cleaner, operator actions and the prefetcher's own threads may write.
enum class EvictMode : uint8_t { kMayWrite, kCleanOnly };

// What PromoteTo did with a page (prefetch counts these).
enum class PromoteOutcome {
  kPromoted,      // now in the target tier
  kAlreadyThere,  // was at or above the target tier
  kMissing,       // not in the index (or deleted meanwhile)
  kBusy,          // someone else holds a pin (a GET is reading it)
  kNoRoom,        // the target tier could not make room (pinned, quota)
  kFailed,        // read error or checksum mismatch (a corrupt page is dropped)
};

struct PromoteResult {
  PromoteOutcome outcome = PromoteOutcome::kMissing;
  PagePin pin;  // valid for kPromoted and kAlreadyThere
};

// Demand reads of a lower tier tell the prefetcher (which implements this
// outside tiers/) to hold back new promotions while they run.
class DemandReadHook {
 public:
  virtual ~DemandReadHook() = default;
  virtual void BeginDemandRead() = 0;
  virtual void EndDemandRead() = 0;
};

struct ReadOptions {
  // Move a page read from below the promotion target up into it (and serve
  // it from there), when the config's promote_on_get allows and the target
  // has clean room; otherwise the page is read into the caller's bounce
  // buffer.
  bool promote = true;
  int promote_to = -1;  // tier index; -1: the highest host-addressable tier
  DemandReadHook* demand = nullptr;
  // ReadPages: bounce-buffer bytes it keeps in flight at most (further
  // reads wait for completions); at least one page's.
  uint64_t max_bounce_bytes = 64ull << 20;
  // Promotions only (PromotePinned, whatever promote_on_get says): a page
  // that is not moved up is handed over with why (NotFound: deleted;
  // Unavailable: busy; ResourceExhausted: no room; DataLoss: corrupt; or
  // the read's error) instead of being read into a bounce buffer.
  bool promote_only = false;
  // How a promotion may make room in its target: a GET's only by dropping
  // clean pages; the prefetcher's may write a dirty one back.
  EvictMode promote_evict = EvictMode::kCleanOnly;
  // Per pin (empty: none): the token a waiter sets when it joins this
  // page's promotion later; its device read is issued with it, so a read
  // still queued as prefetch is served as demand from then on (io_class.h).
  absl::Span<const IoUrgency> urgency;
};

// ReadPages hands page i's bytes (or why it has none) to this, on the
// calling thread; the bytes are valid during the call only.
using PageReadFn = absl::FunctionRef<void(size_t i, absl::StatusOr<const uint8_t*> bytes)>;

// Receives a layer-wise read (TierManager::ReadLayers) layer by layer, on
// the calling thread.
class LayerSink {
 public:
  virtual ~LayerSink() = default;
  // Layer l of page i, verified. The bytes are valid during this call
  // only: a layer read into a bounce unit goes back to the thread's pool
  // once handed over, and the next layer's read may reuse it. Copy them
  // (or finish with them) before returning.
  virtual void Layer(size_t i, uint32_t l, const uint8_t* bytes) = 0;
  // Every page still readable has handed over layers 0..l (called for
  // l = 0, 1, ... in order).
  virtual void LayerDone(uint32_t l) = 0;
  // Page i cannot be read, and none of its further layers follow (the ones
  // handed over were verified: right, but the page is incomplete). DataLoss:
  // a miss (corrupt on disk; pins[i] was reset); other codes: an error.
  virtual void PageFailed(size_t i, absl::Status why) = 0;
};

// How ReadLayers read the pages it was given.
struct LayerReadStats {
  uint32_t ram_pages = 0;      // host-addressable already
  uint32_t chunked_pages = 0;  // read layer by layer, verified by their chunks
  uint32_t whole_pages = 0;    // read whole first (no chunk sums recorded)
  uint32_t promoted_pages = 0; // of those read, moved up into the promotion target
};

struct LookupResult {
  uint32_t hits = 0;               // leading keys present
  std::vector<TierKind> tiers;     // tier of each hit
};

struct TierSnapshot {
  TierKind kind;
  std::string backing;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t pages = 0;
  uint64_t pinned_pages = 0;
  uint64_t hits = 0;        // GETs served from this tier
  uint64_t misses = 0;      // GET keys looked for here and not found
  uint64_t evictions = 0;   // pages evicted (dropped or demoted) from this tier
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t demotions = 0;        // pages moved down out of this tier
  uint64_t promotions = 0;       // pages moved up into this tier
  uint64_t dropped = 0;          // pages that left the store from this tier
  uint64_t admission_drops = 0;  // of those: refused by the admission filter
  uint64_t checksum_errors = 0;  // pages read back with the wrong checksum
  uint64_t clean_pages = 0;      // pages here with a durable copy below
  uint64_t cleaned = 0;          // pages the cleaner wrote back
  uint64_t durability_failures = 0;  // PUT pages refused: their durable copy failed
  EvictionPolicy eviction = EvictionPolicy::kLru;
  uint64_t protected_pages = 0;  // 2q: pages on the protected lists
  uint64_t ghost_entries = 0;    // 2q: fingerprints of pages evicted from probation
  IoCounters io;                 // the tier's page I/O counters
  DurableCounters durable;       // its durable index's (persistent tiers)
  uint64_t alloc_failures = 0;   // its slot space's refusals
};

struct NamespaceSnapshot {
  NamespaceId id = 0;
  std::string name;
  uint64_t pages = 0;
  uint64_t bytes = 0;
  uint64_t lookup_hits = 0, lookup_misses = 0;
  uint64_t get_hits = 0, get_misses = 0;
  uint64_t puts = 0, dedup_puts = 0;
  uint64_t quota_evictions = 0;
  absl::flat_hash_map<TierKind, uint64_t> tier_bytes;
  absl::flat_hash_map<TierKind, uint64_t> tier_quota_bytes;
  absl::flat_hash_map<TierKind, uint64_t> tier_reserved_bytes;  // reserves set (non-zero)
};

struct StoreSnapshot {
  std::vector<TierSnapshot> tiers;           // highest tier first
  std::vector<NamespaceSnapshot> namespaces;
  uint64_t index_pages = 0;
};

class TierManager {
 public:
  // `tiers` ordered highest (fastest) first; at least one. `shared`: the
  // shared cache beside the store (shared_cache.h), or nullptr: pages
  // leaving the last tier are published to it (shared_admission), and PUTs
  // with shared_write_through. It must outlive the store. Fetching from it
  // and forgetting records are the daemon's.
  static absl::StatusOr<std::unique_ptr<TierManager>> Create(
      const TierManagerConfig& config, std::vector<std::unique_ptr<Tier>> tiers,
      SharedCache* shared = nullptr);
  ~TierManager();  // stops the evictor; all pins and reservations must be gone

  // Registers a namespace (idempotent by name: returns the existing id and
  // ignores `config`). InvalidArgument, naming the namespace and tier, for a
  // reserve above the tier's capacity or the namespace's quota there, or
  // one that brings the tier's reserves above max_reserved_fraction.
  absl::StatusOr<NamespaceId> AddNamespace(const NamespaceConfig& config);
  absl::StatusOr<NamespaceId> FindNamespace(std::string_view name) const;

  // Counts leading keys present in `ns`; refreshes their recency tail-first so
  // a chain's ancestors stay more recent than its descendants.
  LookupResult Lookup(NamespaceId ns, absl::Span<const PageKey> keys);

  // Pins a page for reading and refreshes its recency; nullopt on a miss.
  // Counts a GET hit or miss for the namespace and tier.
  std::optional<PagePin> PinForRead(NamespaceId ns, const PageKey& key);

  // Starts a PUT of one page of `bytes`. A present key, or one another PUT
  // holds reserved, is deduplicated (recency refreshed, nothing stored).
  // Otherwise claims the key and reserves a slot in the highest tier with
  // room, making room only by dropping *clean* LRU pages (the namespace's
  // own first when it is over its quota): never disk I/O, so the frontend
  // may call it. With no clean page to drop the page lands in the next tier
  // down (NVMe, written by the caller's copy worker) and the evictor is
  // asked to clean. Write-through: also reserves the durable copy, or fails.
  // ResourceExhausted names the tiers and namespace when nothing fits.
  absl::StatusOr<ReserveResult> Reserve(NamespaceId ns, const PageKey& key,
                                        const PageKey& parent, uint64_t bytes);

  // Removes a page from the index. Returns false when absent. A pinned page is
  // detached and freed on its last unpin.
  bool Delete(NamespaceId ns, const PageKey& key);

  // Evicts from tier `tier_index` until its usage is at or below
  // `target_bytes`, or nothing evictable remains. Returns pages evicted.
  // Used by the evictor thread and by tests.
  size_t EvictTo(size_t tier_index, uint64_t target_bytes);

  // Writes back the coldest dirty pages of RAM tier `tier_index` to the
  // persistent tier (batches, one sync each) until clean_fraction of it is
  // clean; returns pages cleaned. The evictor thread does this on its own;
  // tests and operator flushes call it. May do disk I/O.
  size_t Clean(size_t tier_index);

  // Re-creates the pages of persistent tiers (NVMe) from their indexes, in
  // their recorded LRU order. Call once, after every namespace is added and
  // before serving. Records of unknown namespaces are deleted.
  absl::Status RecoverPersistent();

  // The read operation, for copy workers (it may read the disk): makes a
  // pinned page readable from host memory and returns its bytes, valid while
  // `pin` and `bounce` live. A host-addressable slot is returned as it is; a
  // page of a lower tier is promoted (ReadOptions) or read into `bounce`,
  // and bytes from a persistent tier are verified against their checksum.
  // DataLoss: the page failed it (it was dropped and `pin` is reset: a
  // miss, never wrong bytes); other errors are I/O errors.
  absl::StatusOr<const uint8_t*> ReadPage(PagePin& pin, std::vector<uint8_t>& bounce,
                                          const ReadOptions& options);

  // The read operation for a whole GET range (tiers/store/page_reads.cc), on a
  // copy worker: ReadPage for every valid pin of `pins` at once. Reads of
  // pages below host memory are all started first (up to the tier's queue
  // depth and options.max_bounce_bytes in flight; the rest as reads
  // complete), each into its promotion target slot (ReadPage's rules) or a
  // bounce buffer; then host-addressable pages are handed to `on_page`;
  // then each read page as its read completes, once verified. `on_page`
  // runs exactly once per valid pin, on the calling thread. Outcomes as
  // ReadPage: DataLoss resets pins[i] (a miss, never wrong bytes); other
  // errors are that page's alone. `on_page` may Reset pins[i] (the batch is
  // done with it). Returns once every page was handed over.
  void ReadPages(absl::Span<PagePin> pins, const ReadOptions& options, PageReadFn on_page);

  // The read operation of a layer-wise GET (tiers/store/layer_reads.cc), on a copy
  // worker: pages of `layers` contiguous slices of `layer_bytes` each. Pages
  // below host memory are read layer-major: the part of every page that
  // holds layer l is read as one batch (all in flight at once, up to the
  // tier's queue depth), verified by the page's chunk sums
  // (verify_chunks.h), handed to `sink`, while the next layers' reads are
  // already in flight; into the promotion target's slot (ReadPage's rules)
  // or a bounce buffer. A page recorded without chunk sums is read and
  // verified whole before its first layer. No unverified byte is ever
  // handed over. A pin whose page is not layers * layer_bytes fails with
  // InvalidArgument. Returns once every valid pin's page was handed over or
  // failed.
  LayerReadStats ReadLayers(absl::Span<PagePin> pins, uint64_t layer_bytes, uint32_t layers,
                            const ReadOptions& options, LayerSink& sink);

  // promote_on_get's move (ReadPage uses it; kvtier-sim too): PromoteTo the
  // highest host-addressable tier, making room only by dropping clean pages,
  // so the pin's data() becomes addressable. Best effort: false when
  // promotion is off, someone else holds the page, that tier has no clean
  // room, or the bytes failed their checksum (the page is dropped).
  bool Promote(PagePin& pin);

  // --- Operator actions (tiers/store/admin.cc); they may do disk I/O. ---
  // Evicts up to `max_pages` unpinned pages of namespace `ns`, least recently
  // used first. `tier` set: pages leave that tier, demoted one tier down when
  // there is one (one sync per page into a persistent tier; refused by the
  // admission filter: dropped), else dropped. nullopt: pages are dropped from
  // the store, lowest tier first, leaf-first along chains. Returns pages
  // evicted; InvalidArgument when the store has no such tier.
  absl::StatusOr<uint64_t> EvictNamespace(NamespaceId ns, std::optional<TierKind> tier,
                                          uint64_t max_pages);
  // Demotes every unpinned page of the volatile tiers, top first, until the
  // last tier (persistent) holds them: durable, so a restart finds them.
  // Returns pages that left the volatile tiers for the persistent one (or
  // were dropped by its admission filter); FailedPrecondition when the last
  // tier is not persistent.
  absl::StatusOr<uint64_t> FlushToPersistent();
  // Pages of `ns` in the store (0 for an unknown namespace).
  uint64_t NamespacePages(NamespaceId ns) const;

  // --- Promotion entry points for prefetch/ (promotion.cc) ---
  // Index of the highest tier of `kind`, or -1 when there is none.
  int TierIndex(TierKind kind) const;
  // Index of the tier holding (ns, key) now, or -1 when absent. Touches no
  // recency and counts nothing (a probe, not a read).
  int Locate(NamespaceId ns, const PageKey& key) const;
  // The same, and the page's real size in *bytes (budgets count what is
  // stored, never what a session declares).
  int Locate(NamespaceId ns, const PageKey& key, uint64_t* bytes) const;
  // Pins a page to promote it: like PinForRead, but counts no GET hit or
  // miss and does not mark the page reused (a prefetch is not a read).
  std::optional<PagePin> PinForPromotion(NamespaceId ns, const PageKey& key);
  // Holds a page in the store for a lease (LOOKUP with a lease): it is not
  // evicted from any tier while held, yet promotions may still move it up
  // (a hold reads nothing). Counts no hit or miss. nullopt on a miss.
  std::optional<PagePin> HoldForLease(NamespaceId ns, const PageKey& key);
  // Moves a pinned page up to tier `to` (regardless of promote_on_get):
  // reads it into a new slot there, checks its checksum when it comes from a
  // persistent tier, then switches the entry over. The pin must be the
  // page's only one (readers use its slot). Pages at or above `to` are left.
  // Room in `to` is made as `mode` allows.
  PromoteOutcome PromoteTo(PagePin& pin, size_t to, EvictMode mode = EvictMode::kCleanOnly);
  // Promotes the pinned pages (PinForPromotion) to tier `to` with every
  // read below host memory in flight at once (ReadPages' machinery; a page
  // already in host memory, or a target that is not, takes PromoteTo), and
  // calls `on_done(i, outcome)` once per pin, on the calling thread, as soon
  // as page i is up or known not to be. After on_done, pins[i] still pins
  // the page for kPromoted and kAlreadyThere (the caller keeps or resets
  // it); otherwise it is empty.
  // `urgency`, when given, holds one token per pin (ReadOptions::urgency).
  void PromotePinned(absl::Span<PagePin> pins, size_t to, EvictMode mode,
                     absl::FunctionRef<void(size_t i, PromoteOutcome outcome)> on_done,
                     absl::Span<const IoUrgency> urgency = {});
  // Pins and promotes each key to tier `to`; the pins of the pages that end
  // at or above `to` come back (for the caller to hold as leases).
  std::vector<PromoteResult> PromoteBatch(NamespaceId ns, absl::Span<const PageKey> keys,
                                          size_t to, EvictMode mode = EvictMode::kCleanOnly);

  // Largest page any tier can hold (HELLO rejects layouts above it).
  uint64_t MaxPageBytes() const;

  StoreSnapshot Snapshot() const;
  const TierManagerConfig& config() const;

 private:
  friend class PagePin;
  friend class Reservation;
  friend class PageReadBatch;
  friend class LayerReadBatch;
  struct Impl;
  explicit TierManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::tiers
