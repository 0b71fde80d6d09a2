// ShmRegion: the host tier's memory, one shared mapping. Tries hugetlb pages
// (memfd with MFD_HUGETLB) when asked, else POSIX shared memory with
// transparent-hugepage advice. The region is never prefaulted: pages are
// backed on first touch, so a large arena costs nothing until used.
#pragma once

#include <cstdint>
#include <atomic>
#include <memory>
#include <thread>
#include <string>

#include "absl/status/statusor.h"
#include "tiers/host/host_tier.h"

namespace kvtier::tiers {

class ShmRegion {
 public:
  static constexpr uint64_t kHugePageBytes = 2ull << 20;

  // Maps `bytes` of shared memory. `name` is the POSIX shm name ("/x"); empty
  // picks "/kvtier-host-<pid>" (with a "-<n>" suffix for later regions of the
  // same process). kOn fails with FailedPrecondition when hugetlb pages cannot
  // be had; kAuto falls back to shm; kOff never tries hugetlb.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(const std::string& name, uint64_t bytes,
                                                           HugepageMode mode);
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  // Unmaps, closes and unlinks the shm name.
  ~ShmRegion();

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The name it was created under (empty for a hugetlb memfd); unlinked as
  // soon as it is mapped.
  const std::string& name() const { return name_; }
  bool hugetlb() const { return hugetlb_; }
  // What was obtained, e.g. "shm /kvtier-host-12 (4 KiB pages, THP advised)".
  const std::string& backing() const { return backing_; }

  // Faults the whole region in on a background thread (MADV_POPULATE_WRITE,
  // which leaves the bytes alone, so it is safe while slots are in use), so
  // the first PUTs do not pay a page fault per 4 KiB. Stops at destruction.
  void PopulateInBackground();

 private:
  ShmRegion() = default;
  static absl::StatusOr<std::unique_ptr<ShmRegion>> CreateHugetlb(uint64_t bytes);
  static absl::StatusOr<std::unique_ptr<ShmRegion>> CreateShm(const std::string& name,
                                                              uint64_t bytes);

  std::thread populate_;
  std::atomic<bool> stop_populate_{false};
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
  std::string name_;
  bool linked_ = true;  // the name still exists in /dev/shm
  bool hugetlb_ = false;
  std::string backing_;
};

}  // namespace kvtier::tiers
