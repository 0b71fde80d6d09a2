// The one interface every storage tier implements (HBM, host, NVMe). A tier
// is mechanism only, in three roles: slot space (Allocate, Free, capacity),
// page I/O (Write, Read, and the asynchronous ReadAsync/ReadRangeAsync,
// whose defaults are synchronous: a tier that can overlap reads must
// override both), and, for a persistent tier, the durable index
// (PersistBatch, Unpersist, Recover, ReadChunkSums). Placement, recency,
// pins and quotas live in TierManager, which owns the page index.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"
#include "tiers/io_class.h"
#include "tiers/verify_chunks.h"

namespace kvtier::tiers {

// Values match kvtier.wire.Tier.
enum class TierKind : uint8_t { kHbm = 1, kHost = 2, kNvme = 3, kRemote = 4 };
std::string_view TierName(TierKind kind);

// A slot's location inside its tier. Opaque to everyone but the tier.
struct Slot {
  uint64_t offset = 0;  // byte offset in the tier's space
  uint32_t bytes = 0;   // usable bytes (the page size it was allocated for)
  uint32_t cls = 0;     // size class, for the tier's allocator
};

struct TierCounters {
  uint64_t bytes_written = 0;  // bytes copied into slots
  uint64_t bytes_read = 0;     // bytes copied out of slots
  uint64_t alloc_failures = 0;
  // Persistent tiers only:
  uint64_t io_inflight = 0;     // device I/Os in flight now
  uint64_t io_errors = 0;       // failed device reads/writes
  uint64_t recovered_pages = 0; // pages adopted from the index at start
  uint64_t dropped_records = 0; // index records that failed validation at start
  uint64_t forbidden_io = 0;    // I/Os done on a thread in a NoDiskIoScope (a bug; tests assert 0)
  // Async device I/Os by class (io_class.h) and their summed latency.
  uint64_t class_ios[kIoClasses] = {};
  uint64_t class_latency_us[kIoClasses] = {};
};

// What a persistent tier records about a page so a restarted daemon can serve
// it again. The namespace is recorded by name: ids are per process.
struct PageMeta {
  absl::string_view ns_name;
  PageKey key;
  PageKey parent;
  uint64_t checksum = 0;  // xxh3-64 of the page bytes
  uint64_t stamp = 0;     // recency, to rebuild LRU order
  // Record only if the key has no record yet. Moves (demotion, cleaning) set
  // it: a record already there belongs to a newer PUT of the key (the moved
  // page was deleted meanwhile), which must keep it. A PUT's own record
  // replaces any (its key is claimed; an older record is one being deleted).
  bool create_only = false;
};

class Tier {
 public:
  virtual ~Tier() = default;

  virtual TierKind kind() const = 0;
  // Human-readable backing, e.g. "shm /kvtier-123 (2 MiB hugepages)".
  virtual std::string backing() const = 0;
  virtual uint64_t capacity_bytes() const = 0;
  // Bytes of slots handed out (slot granularity, not page bytes).
  virtual uint64_t used_bytes() const = 0;
  // Largest page one slot can hold (a host tier's slab size). Defaults to the
  // capacity for tiers without such a limit.
  virtual uint64_t max_slot_bytes() const { return capacity_bytes(); }

  // Reserves a slot for a page of `bytes`. ResourceExhausted when no slot of
  // that size is free (the caller evicts and retries); InvalidArgument when
  // `bytes` can never fit. Thread-safe.
  virtual absl::StatusOr<Slot> Allocate(uint64_t bytes) = 0;
  // Returns a slot from Allocate. Thread-safe.
  virtual void Free(const Slot& slot) = 0;

  // Host-addressable bytes of a slot, or nullptr when the tier is not
  // load/store addressable (NVMe): callers then use Read/Write.
  virtual uint8_t* Address(const Slot& slot) = 0;
  // Copy n bytes at `offset` within the slot; bounds-checked. Thread-safe for
  // distinct slots.
  virtual absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) = 0;
  virtual absl::Status Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) = 0;
  // Reads the whole page of `slot` (slot.bytes bytes) into dst, which has
  // room for `dst_room` >= slot.bytes bytes, and calls `done` exactly once
  // with the result: on the calling thread before ReadAsync returns, or on
  // one of the tier's I/O threads, where it must be quick and must not block
  // or take a lock held around a ReadAsync call (nvme::IoCallback). The
  // caller keeps dst alive and untouched until then. The default reads
  // synchronously; a block tier reads straight into a block-aligned dst
  // whose room covers the slot's whole blocks, other dsts through a buffer
  // of its own. Thread-safe for distinct slots.
  using ReadDone = std::function<void(absl::Status)>;
  virtual void ReadAsync(const Slot& slot, void* dst, uint64_t dst_room, ReadDone done) {
    done(Read(slot, 0, dst, slot.bytes));
  }
  // ReadAsync of the page's bytes [offset, offset + n) only, into dst (room
  // for dst_room bytes): offset a multiple of 4 KiB; n too, unless the range
  // reaches the page end. Same contract as ReadAsync otherwise. The default
  // reads synchronously.
  virtual void ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst,
                              uint64_t dst_room, ReadDone done) {
    done(Read(slot, offset, dst, n));
  }
  // The verification chunks recorded for the page `meta` names in `slot`
  // (verify_chunks.h), so a part of it can be verified alone; empty when
  // the tier keeps none (volatile tiers: their bytes never leave the
  // process) or the page was recorded without them. May read the tier's
  // index (disk). Thread-safe.
  virtual ChunkSums ReadChunkSums(const Slot& slot, const PageMeta& meta) { return {}; }
  // How many ReadAsync calls are worth keeping in flight at once (the
  // device's queue depth); 1 for tiers without asynchronous I/O.
  virtual uint32_t queue_depth() const { return 1; }

  virtual TierCounters counters() const = 0;

  // A long-lived memory region (another tier's arena) that this tier's I/O
  // reads from and writes into; an io_uring tier registers it as fixed
  // buffers. Best effort; the default ignores it.
  virtual absl::Status RegisterIoRegion(void* base, uint64_t len) { return absl::OkStatus(); }
  // Host-addressable region of this tier's slots, if any (for the above).
  virtual std::pair<uint8_t*, uint64_t> Region() { return {nullptr, 0}; }

  // --- Persistence (NVMe). Volatile tiers keep the defaults. ---
  virtual bool persistent() const { return false; }
  // Records pages whose bytes were fully written to `slots`, with one sync
  // for all of them. Makes the bytes durable *before* the records, so a crash
  // never yields a record whose bytes are not there. `written`, if given,
  // says per page whether its record was written (create_only may skip one).
  virtual absl::Status PersistBatch(const std::vector<Slot>& slots,
                                    const std::vector<PageMeta>& metas,
                                    std::vector<bool>* written = nullptr) {
    if (written != nullptr) written->assign(slots.size(), true);
    return absl::OkStatus();
  }
  // Forgets the record of a page if it still points at `slot` (a newer copy
  // of the key elsewhere keeps its record); called before the slot is freed
  // so the record never outlives the bytes.
  virtual void Unpersist(const Slot& slot, const PageMeta& meta) {}
  // At start: offers every valid record to `adopt` (which returns false to
  // reject it, e.g. unknown namespace: the record is then deleted). Slots of
  // adopted pages are marked allocated. Invalid records are deleted and
  // counted in dropped_records.
  using AdoptFn = std::function<bool(const PageMeta& meta, const Slot& slot)>;
  virtual absl::Status Recover(const AdoptFn& adopt) { return absl::OkStatus(); }
};

}  // namespace kvtier::tiers
