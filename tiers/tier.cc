// Names of the tier kinds, as shown by STATS and kvtierctl and used in error
// messages; the synchronous read every tier gets over its asynchronous one.
#include "tiers/tier.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tiers/common/io_guard.h"

namespace kvtier::tiers {

std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kHbm:
      return "hbm";
    case TierKind::kHost:
      return "host";
    case TierKind::kNvme:
      return "nvme";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

namespace {

// Reads [offset, offset + n) of `slot`, which the tier's alignment allows,
// into dst (room for n) and waits for it: at once when the tier completes on
// this thread, else until its I/O thread calls back.
absl::Status ReadAndWait(PageIo& io, const Slot& slot, uint64_t offset, uint64_t n, void* dst) {
  absl::Notification done;
  absl::Status result;
  io.ReadRangeAsync(slot, offset, n, dst, n, [&](absl::Status st) {
    result = std::move(st);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace

absl::Status PageIo::Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError(absl::StrCat("read [", offset, ", +", n, ") outside a ",
                                              slot.bytes, "-byte slot"));
  const uint64_t align = std::max<uint64_t>(read_alignment(), 1);
  const uint64_t start = offset / align * align;
  const uint64_t rounded = (offset + n + align - 1) / align * align;
  const uint64_t end = std::min<uint64_t>(slot.bytes, rounded);  // a range may end the page
  if (start == offset && end == offset + n) return ReadAndWait(*this, slot, offset, n, dst);
  // Not on the tier's grain: the covering aligned range, then the part asked.
  std::unique_ptr<uint8_t[]> bounce(new uint8_t[end - start]);
  if (absl::Status st = ReadAndWait(*this, slot, start, end - start, bounce.get()); !st.ok())
    return st;
  std::memcpy(dst, bounce.get() + (offset - start), n);
  return absl::OkStatus();
}

}  // namespace kvtier::tiers

// io_guard.h
namespace kvtier::tiers {
namespace {
thread_local bool tls_no_disk_io = false;
}  // namespace

NoDiskIoScope::NoDiskIoScope() : prev_(tls_no_disk_io) { tls_no_disk_io = true; }
NoDiskIoScope::~NoDiskIoScope() { tls_no_disk_io = prev_; }
bool DiskIoForbiddenHere() { return tls_no_disk_io; }

}  // namespace kvtier::tiers
