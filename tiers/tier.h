// The one interface every storage tier implements (HBM, host, NVMe), in three
// roles: SlotSpace (where pages live: allocate, free, capacity, addresses),
// PageIo (moving bytes: asynchronous reads first, with the synchronous form a
// helper over them, so no tier can forget the asynchronous one), and, for a
// persistent tier only, DurableIndex (persist, unpersist, recover, chunk
// sums). Each role reports its own counters. A tier is mechanism only:
// placement, recency, pins and quotas live in the store (tiers/store/).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"
#include "tiers/common/io_class.h"
#include "tiers/common/verify_chunks.h"

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

// What a tier's page I/O counted (PageIo::io_counters). RAM tiers count
// bytes; a device tier (NVMe) also its device's I/O state.
struct IoCounters {
  uint64_t bytes_written = 0;  // bytes copied into slots
  uint64_t bytes_read = 0;     // bytes copied out of slots
  uint64_t io_inflight = 0;    // device I/Os in flight now
  uint64_t io_errors = 0;      // failed device reads/writes
  uint64_t forbidden_io = 0;   // I/Os done on a thread in a NoDiskIoScope (a bug; tests assert 0)
  // Async device I/Os by class (io_class.h) and their summed latency.
  uint64_t class_ios[kIoClasses] = {};
  uint64_t class_latency_us[kIoClasses] = {};
};

// What a durable index counted when the daemon started (DurableIndex).
struct DurableCounters {
  uint64_t recovered_pages = 0;  // pages adopted from the index at start
  uint64_t dropped_records = 0;  // index records that failed validation at start
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

// Where a tier's pages live.
class SlotSpace {
 public:
  virtual ~SlotSpace() = default;
  virtual uint64_t capacity_bytes() const = 0;
  // Bytes of slots handed out (slot granularity, not page bytes).
  virtual uint64_t used_bytes() const = 0;
  // Largest page one slot can hold (a slab's size).
  virtual uint64_t max_slot_bytes() const = 0;
  // Reserves a slot for a page of `bytes`. ResourceExhausted when no slot of
  // that size is free (the caller evicts and retries); InvalidArgument when
  // `bytes` can never fit. Thread-safe.
  virtual absl::StatusOr<Slot> Allocate(uint64_t bytes) = 0;
  // Returns a slot from Allocate. Thread-safe.
  virtual void Free(const Slot& slot) = 0;
  // Allocations refused so far.
  virtual uint64_t alloc_failures() const = 0;
  // Host-addressable bytes of a slot, or nullptr when the tier is not
  // load/store addressable (HBM, NVMe): callers then use PageIo.
  virtual uint8_t* Address(const Slot& slot) = 0;
  // The host-addressable region of all slots, or {nullptr, 0}.
  virtual std::pair<uint8_t*, uint64_t> Region() { return {nullptr, 0}; }
};

// Moving a page's bytes in and out of its slot. Reads are asynchronous
// first: ReadRangeAsync is the one read a tier implements; ReadAsync and the
// synchronous Read are helpers over it. Writes are synchronous (the store
// batches them, with one sync per batch, on threads that may block).
class PageIo {
 public:
  virtual ~PageIo() = default;
  // Copies n bytes at `offset` within the slot; bounds-checked. Thread-safe
  // for distinct slots. A block tier takes whole pages only.
  virtual absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) = 0;
  // Reads the page's bytes [offset, offset + n) into dst, which has room for
  // `dst_room` >= n bytes, and calls `done` exactly once with the result: on
  // the calling thread before ReadRangeAsync returns, or on one of the
  // tier's I/O threads, where it must be quick and must not block or take a
  // lock held around a ReadRangeAsync call (nvme::IoCallback). The caller
  // keeps dst alive and untouched until then. `offset` must be a multiple of
  // read_alignment(), and so must n unless the range reaches the page end. A
  // block tier reads straight into a block-aligned dst whose room covers
  // the range's whole blocks, other dsts through a buffer of its own.
  // Thread-safe for distinct slots.
  using ReadDone = std::function<void(absl::Status)>;
  virtual void ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst,
                              uint64_t dst_room, ReadDone done) = 0;
  // The granularity of ReadRangeAsync's offsets: 1 (the default) for RAM,
  // the block size for a block device.
  virtual uint64_t read_alignment() const { return 1; }
  // How many reads are worth keeping in flight at once (the device's queue
  // depth); 1 (the default) for tiers that complete every read on the
  // calling thread.
  virtual uint32_t queue_depth() const { return 1; }
  // A long-lived memory region (another tier's arena) that this tier's I/O
  // reads from and writes into; an io_uring tier registers it as fixed
  // buffers. Best effort; the default ignores it.
  virtual absl::Status RegisterIoRegion(void* base, uint64_t len) { return absl::OkStatus(); }
  virtual IoCounters io_counters() const = 0;

  // The whole page: ReadRangeAsync of [0, slot.bytes).
  void ReadAsync(const Slot& slot, void* dst, uint64_t dst_room, ReadDone done) {
    ReadRangeAsync(slot, 0, slot.bytes, dst, dst_room, std::move(done));
  }
  // Any n bytes at any offset, waiting for them (through an aligned bounce
  // when the range is not aligned). Blocks on device I/O: not for threads
  // that may not do disk I/O.
  absl::Status Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n);
};

// What a persistent tier keeps so that a restarted daemon serves its pages
// again: a record per page, written after the page's bytes are durable.
class DurableIndex {
 public:
  virtual ~DurableIndex() = default;
  // Records pages whose bytes were fully written to `slots`, with one sync
  // for all of them. Makes the bytes durable *before* the records, so a crash
  // never yields a record whose bytes are not there. `written`, if given,
  // says per page whether its record was written (create_only may skip one).
  virtual absl::Status PersistBatch(const std::vector<Slot>& slots,
                                    const std::vector<PageMeta>& metas,
                                    std::vector<bool>* written = nullptr) = 0;
  // Forgets the record of a page if it still points at `slot` (a newer copy
  // of the key elsewhere keeps its record); called before the slot is freed
  // so the record never outlives the bytes.
  virtual void Unpersist(const Slot& slot, const PageMeta& meta) = 0;
  // At start: offers every valid record to `adopt` (which returns false to
  // reject it, e.g. unknown namespace: the record is then deleted). Slots of
  // adopted pages are marked allocated. Invalid records are deleted and
  // counted in dropped_records.
  using AdoptFn = std::function<bool(const PageMeta& meta, const Slot& slot)>;
  virtual absl::Status Recover(const AdoptFn& adopt) = 0;
  // The verification chunks recorded for the page `meta` names in `slot`
  // (verify_chunks.h), so a part of it can be verified alone; empty when the
  // page was recorded without them. May read the index (disk). Thread-safe.
  virtual ChunkSums ReadChunkSums(const Slot& slot, const PageMeta& meta) = 0;
  virtual DurableCounters durable_counters() const = 0;
};

class Tier : public SlotSpace, public PageIo {
 public:
  virtual TierKind kind() const = 0;
  // Human-readable backing, e.g. "shm /kvtier-123 (2 MiB hugepages)".
  virtual std::string backing() const = 0;
  // The tier's durable index: nullptr for a volatile tier (its bytes never
  // outlive the process, and it records nothing).
  DurableIndex* durable() const { return durable_; }
  bool persistent() const { return durable_ != nullptr; }

 protected:
  // A persistent tier names its index once, at construction.
  explicit Tier(DurableIndex* durable = nullptr) : durable_(durable) {}

 private:
  DurableIndex* const durable_;
};

}  // namespace kvtier::tiers
