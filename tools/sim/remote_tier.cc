// RemoteAccountingTier: RemoteTier's bookkeeping (tiers/remote/remote_tier.cc)
// with the cluster replaced by SharedBacking's record names. Every page
// reads back as zeros, what the sim writes, so checksums always agree.
#include "tools/sim/remote_tier.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tools/sim/accounting_tier.h"

namespace kvtier::sim {
namespace {

absl::Status Miss(absl::string_view why, const tiers::Slot& slot) {
  return absl::DataLossError(absl::StrCat("remote page (slot ", slot.offset, "): ", why));
}

}  // namespace

absl::StatusOr<RemoteAdmission> ParseRemoteAdmission(absl::string_view name) {
  if (name == "all") return RemoteAdmission::kAll;
  if (name == "reused") return RemoteAdmission::kReused;
  if (name == "put") return RemoteAdmission::kPut;
  return absl::InvalidArgumentError(
      absl::StrCat("remote admission '", name, "': expected all, reused or put"));
}

absl::string_view RemoteAdmissionName(RemoteAdmission a) {
  switch (a) {
    case RemoteAdmission::kAll:
      return "all";
    case RemoteAdmission::kReused:
      return "reused";
    case RemoteAdmission::kPut:
      return "put";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<RemoteAccountingTier>> RemoteAccountingTier::Create(
    SharedBacking* backing, uint64_t capacity_pages) {
  if (backing == nullptr) return absl::InvalidArgumentError("remote tier: no shared backing");
  if (capacity_pages == 0)
    return absl::InvalidArgumentError("remote tier: capacity must be at least one page");
  return std::unique_ptr<RemoteAccountingTier>(new RemoteAccountingTier(backing, capacity_pages));
}

std::string RemoteAccountingTier::backing() const {
  return absl::StrCat("kvtier-sim shared LRU records (", shared_->capacity_pages(),
                      " pages; this node keeps up to ", capacity_pages_, ")");
}

uint64_t RemoteAccountingTier::capacity_bytes() const { return capacity_pages_ * kSimPageBytes; }
uint64_t RemoteAccountingTier::used_bytes() const { return handles_.size() * kSimPageBytes; }
uint64_t RemoteAccountingTier::max_slot_bytes() const { return kSimPageBytes; }

RemoteAccountingTier::Handle* RemoteAccountingTier::Find(const tiers::Slot& slot) {
  auto it = handles_.find(slot.offset);
  return it == handles_.end() ? nullptr : &it->second;
}

uint64_t RemoteAccountingTier::NewHandle(Handle h) {
  const uint64_t id = next_handle_++;
  handles_.emplace(id, std::move(h));
  return id;
}

absl::StatusOr<tiers::Slot> RemoteAccountingTier::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > kSimPageBytes) {
    ++alloc_failures_;
    return absl::InvalidArgumentError(absl::StrCat("remote tier: a page of ", bytes, " bytes"));
  }
  if (handles_.size() + 1 > capacity_pages_) {
    ++alloc_failures_;
    return absl::ResourceExhaustedError("remote tier: capacity reached");
  }
  const uint64_t id = NewHandle(Handle{});
  return tiers::Slot{id, static_cast<uint32_t>(bytes), 0};
}

void RemoteAccountingTier::Free(const tiers::Slot& slot) {
  auto it = handles_.find(slot.offset);
  if (it == handles_.end()) return;
  // Not Unpersisted (the page moved up): the record stays for the others.
  if (it->second.stored) {
    auto owner = owner_.find(it->second.name);
    if (owner != owner_.end() && owner->second == slot.offset) owner_.erase(owner);
  }
  handles_.erase(it);
}

absl::Status RemoteAccountingTier::Write(const tiers::Slot& slot, uint64_t offset, const void*,
                                         uint64_t n) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError("remote tier: write past the slot");
  Handle* h = Find(slot);
  if (h == nullptr || h->stored)
    return absl::FailedPreconditionError("remote tier: write to a free or stored slot");
  return absl::OkStatus();  // staged (zeros), stored by PersistBatch
}

absl::Status RemoteAccountingTier::Read(const tiers::Slot& slot, uint64_t offset, void* dst,
                                        uint64_t n) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError("remote tier: read past the slot");
  Handle* h = Find(slot);
  if (h == nullptr) return absl::FailedPreconditionError("remote tier: read of a free slot");
  if (h->stored) {
    if (h->bad) return Miss("found missing or corrupt before", slot);
    ++rc_.reads;
    if (!shared_->Get(h->name)) {
      ++rc_.read_misses;
      h->bad = true;
      return Miss("no longer in the cluster", slot);
    }
  }
  std::memset(dst, 0, n);
  return absl::OkStatus();
}

tiers::TierCounters RemoteAccountingTier::counters() const {
  tiers::TierCounters c;
  c.alloc_failures = alloc_failures_;
  c.missing_reads = rc_.read_misses;
  return c;
}

absl::Status RemoteAccountingTier::PersistBatch(const std::vector<tiers::Slot>& slots,
                                                const std::vector<tiers::PageMeta>& metas,
                                                std::vector<bool>* written) {
  std::vector<bool> ok(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    Handle* h = Find(slots[i]);
    if (h == nullptr || h->stored) continue;
    // RemoteTier SETs whatever record is there (create_only is not asked
    // of the cluster): the newest copy of a key wins.
    h->name = RecordName(metas[i].ns_name, metas[i].key);
    h->stored = true;
    shared_->Set(h->name);
    ++rc_.writes;
    owner_[h->name] = slots[i].offset;
    ok[i] = true;
  }
  if (written != nullptr) *written = std::move(ok);
  return absl::OkStatus();
}

void RemoteAccountingTier::Unpersist(const tiers::Slot& slot, const tiers::PageMeta&) {
  Handle* h = Find(slot);
  if (h == nullptr || !h->stored) return;
  auto it = owner_.find(h->name);
  if (it == owner_.end() || it->second != slot.offset) return;  // adopted, or a newer copy
  owner_.erase(it);
  h->bad = true;
  ++rc_.deletes;
  // Deletes whatever record has the name now, another node's SET included:
  // RemoteTier cannot tell them apart either.
  shared_->Delete(h->name);
}

std::vector<std::optional<tiers::Slot>> RemoteAccountingTier::AdoptShared(
    absl::string_view ns, absl::Span<const PageKey> keys, uint64_t bytes) {
  std::vector<std::optional<tiers::Slot>> out(keys.size());
  if (bytes == 0 || bytes > kSimPageBytes || keys.empty()) return out;
  // One pipelined EXISTS for every key (RemoteTier asks them all), then
  // handles for the found ones while this node's own capacity allows.
  std::vector<std::string> names;
  std::vector<bool> found;
  for (const PageKey& k : keys) {
    names.push_back(RecordName(ns, k));
    found.push_back(shared_->Exists(names.back()));
  }
  rc_.exists += keys.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i]) continue;
    if (handles_.size() + 1 > capacity_pages_) break;
    // Stored, not owned (no owner_ entry): freeing it never deletes the
    // other node's record.
    const uint64_t id = NewHandle(Handle{.stored = true, .bad = false, .name = names[i]});
    out[i] = tiers::Slot{id, static_cast<uint32_t>(bytes), 0};
  }
  return out;
}

bool RemoteAccountingTier::Publish(absl::string_view ns, const PageKey& key, const PageKey&,
                                   const void*, uint64_t) {
  shared_->Set(RecordName(ns, key));
  ++rc_.writes;
  ++rc_.write_through;
  return true;
}

}  // namespace kvtier::sim
