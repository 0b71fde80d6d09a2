// NvmeTier implementation: slot I/O through the checked Device (bouncing
// through an aligned buffer when a caller's bytes are not block-aligned), and
// the persist/recover protocol on top of NvmeIndex.
#include "tiers/nvme/nvme_tier.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kvtier/errors.h"
#include "kvtier/paths.h"
#include "kvtier/status_macros.h"
#include "kvtier/test_hooks.h"
#include "spdlog/spdlog.h"
#include "tiers/common/io_guard.h"
#include "tiers/common/slab_arena.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::tiers {
namespace {

using nvme::kBlockSize;

uint64_t RoundUp(uint64_t n) { return (n + kBlockSize - 1) / kBlockSize * kBlockSize; }
bool Aligned(const void* p, uint64_t n) {
  return reinterpret_cast<uintptr_t>(p) % kBlockSize == 0 && n % kBlockSize == 0;
}

// One device I/O through the async engine (io_uring: fixed file, and fixed
// buffers when `buf` lies in a registered region), waited for here.
template <typename Submit>
absl::Status WaitIo(Submit submit) {
  absl::Notification done;
  absl::Status result;
  submit([&](absl::Status st) {
    result = std::move(st);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t n) : data(static_cast<uint8_t*>(std::aligned_alloc(kBlockSize, n))) {}
  ~AlignedBuffer() { std::free(data); }
  uint8_t* data;
};

// The tier and its durable index in one object: the index's records name
// the tier's slots. DurableIndex is the first base, so it is constructed
// before Tier is handed a pointer to it.
class NvmeTier final : public DurableIndex, public Tier {
 public:
  NvmeTier(NvmeTierConfig config, std::unique_ptr<nvme::Device> device,
           std::unique_ptr<SlabArena> arena, std::unique_ptr<nvme::NvmeIndex> index,
           uint64_t valid_bytes)
      : Tier(static_cast<DurableIndex*>(this)), config_(std::move(config)),
        device_(std::move(device)), arena_(std::move(arena)), index_(std::move(index)),
        valid_bytes_(valid_bytes) {}

  TierKind kind() const override { return TierKind::kNvme; }
  std::string backing() const override { return device_->Describe(); }
  uint64_t capacity_bytes() const override { return arena_->capacity(); }
  uint64_t used_bytes() const override { return arena_->used_bytes(); }
  uint64_t max_slot_bytes() const override { return arena_->slab_bytes(); }

  absl::StatusOr<Slot> Allocate(uint64_t bytes) override {
    if (bytes == 0 || bytes > UINT32_MAX)
      return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", bytes, " bytes on NVMe"));
    absl::StatusOr<Slot> slot = arena_->Allocate(RoundUp(bytes));
    if (!slot.ok()) {
      alloc_failures_.fetch_add(1, std::memory_order_relaxed);
      return slot;
    }
    slot->bytes = static_cast<uint32_t>(bytes);  // the page; the slot is rounded up
    return slot;
  }
  void Free(const Slot& slot) override {
    {
      absl::MutexLock lock(&sums_mu_);
      pending_sums_.erase(slot.offset);  // written but never recorded
    }
    arena_->Free(slot);
  }
  absl::Status RegisterIoRegion(void* base, uint64_t len) override {
    return device_->RegisterBufferRegion(base, len);
  }
  uint8_t* Address(const Slot&) override { return nullptr; }
  uint64_t alloc_failures() const override {
    return alloc_failures_.load(std::memory_order_relaxed);
  }

  absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) override {
    CountForbiddenIo();
    if (offset != 0 || n != slot.bytes)
      return absl::InvalidArgumentError("NVMe slots are written whole");
    absl::Status st;
    if (Aligned(src, n)) {
      st = WaitIo([&](nvme::IoCallback cb) { device_->WriteAsync(slot.offset, src, n, std::move(cb)); });
    } else {
      const uint64_t len = RoundUp(n);
      AlignedBuffer bounce(len);
      std::memcpy(bounce.data, src, n);
      std::memset(bounce.data + n, 0, len - n);
      st = WaitIo([&](nvme::IoCallback cb) {
        device_->WriteAsync(slot.offset, bounce.data, len, std::move(cb));
      });
    }
    KVTIER_KILL_POINT("nvme.write.after_data");
    if (!st.ok()) return st;
    bytes_written_.fetch_add(n, std::memory_order_relaxed);
    // The chunks' sums go into the page's record (PersistBatch), from the
    // bytes written, so that a layer can be read and verified alone.
    if (ChunkBytesFor(n) != 0) {
      ChunkSums sums = ComputeChunkSums(static_cast<const uint8_t*>(src), n);
      absl::MutexLock lock(&sums_mu_);
      pending_sums_[slot.offset] = std::move(sums);
    }
    return st;
  }

  void ReadRangeAsync(const Slot& slot, uint64_t offset, uint64_t n, void* dst, uint64_t dst_room,
                      ReadDone done) override {
    CountForbiddenIo();
    if (offset % kBlockSize != 0 || offset > slot.bytes || n > slot.bytes - offset ||
        (n % kBlockSize != 0 && offset + n != slot.bytes) || dst_room < n)
      return done(absl::OutOfRangeError(absl::StrCat("NVMe range read [", offset, ", +", n,
                                                     ") of a ", slot.bytes, "-byte slot into ",
                                                     dst_room, " bytes: not block-aligned")));
    const uint64_t len = RoundUp(n);  // the slot is whole blocks
    if (reinterpret_cast<uintptr_t>(dst) % kBlockSize == 0 && dst_room >= len) {
      device_->ReadAsync(slot.offset + offset, dst, len,
                         [this, n, done = std::move(done)](absl::Status st) {
                           if (st.ok()) bytes_read_.fetch_add(n, std::memory_order_relaxed);
                           done(std::move(st));
                         });
      return;
    }
    // O_DIRECT needs aligned memory: bounce, and copy out on completion
    // (callers that care, like TierManager::ReadPages, pass aligned buffers).
    auto bounce = std::make_shared<AlignedBuffer>(len);
    device_->ReadAsync(slot.offset + offset, bounce->data, len,
                       [this, bounce, dst, n, done = std::move(done)](absl::Status st) {
                         if (st.ok()) {
                           std::memcpy(dst, bounce->data, n);
                           bytes_read_.fetch_add(n, std::memory_order_relaxed);
                         }
                         done(std::move(st));
                       });
  }

  ChunkSums ReadChunkSums(const Slot& slot, const PageMeta& meta) override {
    absl::StatusOr<nvme::IndexRecord> r = index_->Get(meta.ns_name, meta.key);
    // Only this copy's record describes these bytes.
    if (!r.ok() || r->offset != slot.offset || r->bytes != slot.bytes ||
        r->checksum != meta.checksum)
      return {};
    return ChunkSums{r->chunk_bytes, std::move(r->chunk_sums)};
  }

  uint64_t read_alignment() const override { return kBlockSize; }
  uint32_t queue_depth() const override { return config_.io_threads * config_.queue_depth; }

  IoCounters io_counters() const override {
    nvme::DeviceStats d = device_->stats();
    IoCounters c;
    c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    c.io_inflight = d.inflight;
    c.io_errors = d.read_errors + d.write_errors;
    for (size_t k = 0; k < kIoClasses; ++k) {
      c.class_ios[k] = d.class_ios[k];
      c.class_latency_us[k] = d.class_latency_us[k];
    }
    c.forbidden_io = forbidden_io_.load(std::memory_order_relaxed);
    return c;
  }

  // --- DurableIndex: the RocksDB records of the pages on the device. ---
  DurableCounters durable_counters() const override {
    return DurableCounters{recovered_.load(std::memory_order_relaxed),
                           dropped_.load(std::memory_order_relaxed)};
  }

  absl::Status PersistBatch(const std::vector<Slot>& slots, const std::vector<PageMeta>& metas,
                            std::vector<bool>* written = nullptr) override {
    CountForbiddenIo();
    if (written != nullptr) written->assign(slots.size(), false);
    // Bytes first: once a record exists it must point at its page.
    if (absl::Status st = device_->Flush(); !st.ok()) return st;
    KVTIER_KILL_POINT("nvme.persist.after_data");
    std::vector<nvme::IndexRecord> records;
    std::vector<size_t> which;
    records.reserve(slots.size());
    absl::Status st;
    {
      absl::MutexLock lock(&records_mu_);
      for (size_t i = 0; i < slots.size(); ++i) {
        if (metas[i].create_only) {
          absl::StatusOr<bool> exists = index_->Exists(metas[i].ns_name, metas[i].key);
          if (!exists.ok()) return exists.status();
          if (*exists) {
            (void)TakeSums(slots[i]);
            continue;
          }
        }
        nvme::IndexRecord r{std::string(metas[i].ns_name), metas[i].key, metas[i].parent,
                            slots[i].offset, slots[i].bytes, metas[i].checksum, metas[i].stamp};
        if (ChunkSums sums = TakeSums(slots[i]); !sums.empty()) {
          r.chunk_bytes = sums.chunk_bytes;
          r.chunk_sums = std::move(sums.sums);
        }
        records.push_back(std::move(r));
        which.push_back(i);
      }
      if (!records.empty()) st = index_->PutBatch(records);
    }
    if (st.ok() && written != nullptr) {
      for (size_t i : which) (*written)[i] = true;
    }
    KVTIER_KILL_POINT("nvme.persist.after_index");
    return st;
  }

  void Unpersist(const Slot& slot, const PageMeta& meta) override {
    CountForbiddenIo();
    // Only this slot's record: once a page left, a new PUT of its key may
    // own the key's record (another slot), and deleting that would lose an
    // acknowledged page at the next restart. Best effort: a record that
    // survives a failed delete fails its checksum after a restart (a miss).
    absl::MutexLock lock(&records_mu_);
    (void)index_->DeleteIf(meta.ns_name, meta.key, slot.offset);
  }

  absl::Status Recover(const AdoptFn& adopt) override;

 private:
  const NvmeTierConfig config_;
  std::unique_ptr<nvme::Device> device_;
  std::unique_ptr<SlabArena> arena_;
  std::unique_ptr<nvme::NvmeIndex> index_;
  const uint64_t valid_bytes_;  // data file bytes that existed before this start
  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0}, alloc_failures_{0};
  std::atomic<uint64_t> recovered_{0}, dropped_{0};
  std::atomic<uint64_t> forbidden_io_{0};
  // Orders record writes against conditional deletes of the same key.
  absl::Mutex records_mu_;
  // Verification chunks of pages written and not yet recorded, by slot.
  absl::Mutex sums_mu_;
  absl::flat_hash_map<uint64_t, ChunkSums> pending_sums_ ABSL_GUARDED_BY(sums_mu_);

  ChunkSums TakeSums(const Slot& slot) ABSL_LOCKS_EXCLUDED(sums_mu_) {
    absl::MutexLock lock(&sums_mu_);
    auto it = pending_sums_.find(slot.offset);
    if (it == pending_sums_.end()) return {};
    ChunkSums sums = std::move(it->second);
    pending_sums_.erase(it);
    return sums;
  }

  void CountForbiddenIo() {
    if (DiskIoForbiddenHere()) forbidden_io_.fetch_add(1, std::memory_order_relaxed);
  }
};

absl::Status NvmeTier::Recover(const AdoptFn& adopt) {
  std::vector<nvme::IndexRecord> records;
  auto bad = index_->ForEach([&](const nvme::IndexRecord& r) {
    // Records past the end of a truncated data file point at lost bytes.
    if (r.bytes == 0 || r.offset + RoundUp(r.bytes) > valid_bytes_) return false;
    records.push_back(r);
    return true;
  });
  if (!bad.ok()) return bad.status();
  std::vector<Slot> claims;
  claims.reserve(records.size());
  for (const auto& r : records) claims.push_back(Slot{r.offset, static_cast<uint32_t>(RoundUp(r.bytes)), 0});
  std::vector<bool> ok = arena_->Restore(claims);
  uint64_t dropped = *bad;
  for (size_t i = 0; i < records.size(); ++i) {
    const nvme::IndexRecord& r = records[i];
    Slot slot = claims[i];
    slot.bytes = r.bytes;
    PageMeta meta{r.ns, r.key, r.parent, r.checksum, r.stamp};
    if (ok[i] && adopt(meta, slot)) {
      recovered_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (ok[i]) arena_->Free(slot);
    (void)index_->Delete(r.ns, r.key);
    ++dropped;
  }
  dropped_.fetch_add(dropped, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CheckDir(const std::string& dir) {
  RETURN_IF_ERROR(EnsurePrivateDir(dir, "NVMe tier directory"));
  if (access(dir.c_str(), W_OK) != 0)
    return absl::PermissionDeniedError(absl::StrCat("NVMe tier directory ", dir, " is not writable"));
  return absl::OkStatus();
}

}  // namespace

absl::Status NvmeTierConfig::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("NVMe tier: no directory given");
  if (slab_bytes == 0 || slab_bytes % nvme::kBlockSize != 0)
    return absl::InvalidArgumentError("NVMe tier: slab bytes must be a multiple of 4 KiB");
  if (capacity_bytes < slab_bytes)
    return absl::InvalidArgumentError(absl::StrCat("NVMe tier: capacity ", capacity_bytes,
                                                   " is smaller than one slab (", slab_bytes, ")"));
  return absl::OkStatus();
}

namespace {

std::string HumanBytes(uint64_t n) {
  if (n != 0 && n % (1ull << 30) == 0) return absl::StrCat(n >> 30, " GiB");
  if (n != 0 && n % (1ull << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  return absl::StrCat(n, " bytes");
}

std::string Fingerprint(uint64_t capacity, uint64_t slab) {
  return absl::StrCat("kvtier-nvme v1 capacity=", capacity, " slab=", slab);
}

// "capacity 64 MiB, slabs of 1 MiB" from a fingerprint; the fingerprint
// itself when it is not one this version writes.
std::string DescribeGeometry(absl::string_view fingerprint) {
  uint64_t capacity = 0, slab = 0;
  for (absl::string_view part : absl::StrSplit(fingerprint, ' ')) {
    if (absl::ConsumePrefix(&part, "capacity=") && !absl::SimpleAtoi(part, &capacity)) capacity = 0;
    if (absl::ConsumePrefix(&part, "slab=") && !absl::SimpleAtoi(part, &slab)) slab = 0;
  }
  if (capacity == 0 || slab == 0) return absl::StrCat("'", fingerprint, "'");
  return absl::StrCat("capacity ", HumanBytes(capacity), ", slabs of ", HumanBytes(slab));
}

// Opens the index before the data file is touched: a refused start leaves
// both as they were, so a restart with the old geometry finds every page.
absl::StatusOr<std::unique_ptr<nvme::NvmeIndex>> OpenIndex(const NvmeTierConfig& config,
                                                          uint64_t capacity) {
  const std::string fingerprint = Fingerprint(capacity, config.slab_bytes);
  nvme::NvmeIndex::FormatChange change;
  auto index = nvme::NvmeIndex::Open(config.IndexPath(), fingerprint, config.reformat, &change);
  if (change.stored.empty()) return index;
  const std::string was = DescribeGeometry(change.stored), now = DescribeGeometry(fingerprint);
  if (!index.ok()) {
    if (!absl::IsFailedPrecondition(index.status())) return index.status();
    return MarkNeedsOperator(absl::FailedPreconditionError(absl::StrCat(
        "NVMe tier at ", config.dir, ": its data file holds ", change.records,
        " page(s) in the geometry ", was, ", but this start asks for ", now,
        " (--nvme_bytes, --host_slab_bytes); opening it so would lose all of them. Restart "
        "with the old --nvme_bytes and --host_slab_bytes to keep them, or add --reformat_nvme "
        "to drop them and use the new geometry")));
  }
  spdlog::warn("NVMe tier at {}: geometry changed from {} to {} (--reformat_nvme): dropped {} "
               "page(s)",
               config.dir, was, now, change.records);
  return index;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tier>> CreateNvmeTier(const NvmeTierConfig& config,
                                                     std::unique_ptr<nvme::Device> device) {
  if (absl::Status st = config.Validate(); !st.ok()) return st;
  if (absl::Status st = CheckDir(config.dir); !st.ok()) return st;
  const uint64_t capacity = config.capacity_bytes / config.slab_bytes * config.slab_bytes;
  auto index = OpenIndex(config, capacity);
  if (!index.ok()) return index.status();
  uint64_t valid_bytes = capacity;
  if (device == nullptr) {
    struct stat st;
    valid_bytes = stat(config.DataPath().c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    nvme::FileDeviceConfig fc{.path = config.DataPath(), .size = capacity,
                              .io_threads = config.io_threads, .queue_depth = config.queue_depth,
                              .prefetch_share = config.prefetch_share,
                              .writeback_share = config.writeback_share};
    auto dev = nvme::CreateFileDevice(fc);
    if (!dev.ok()) return dev.status();
    device = *std::move(dev);
  }
  if (device->size() < capacity)
    return absl::InvalidArgumentError("NVMe tier: device smaller than the configured capacity");
  auto arena = SlabArena::Create(capacity, config.slab_bytes);
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<Tier>(new NvmeTier(config, std::move(device), *std::move(arena),
                                            *std::move(index), std::min(valid_bytes, capacity)));
}

}  // namespace kvtier::tiers
