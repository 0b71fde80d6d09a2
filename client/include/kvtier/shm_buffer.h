// ShmBuffer: a shared-memory region a client allocates as its KV arena and
// registers with kvtierd: a POSIX shm object, or a memfd of 2 MiB hugetlb
// pages when asked and the machine has them reserved. Owns the mapping and
// the descriptor; unlinks the name on destruction. Not thread-safe to
// create/destroy; the bytes are the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier {

// Whether a buffer is made of hugetlb pages (vm.nr_hugepages). Why it
// matters: every new mapping of a 4 KiB-page buffer pays one fault per page
// at its first access (on a VM with lazily mapped guest pages, ~20 us each:
// ~0.5 s for 72 MiB), once in the client and again in the daemon; with 2 MiB
// pages that is 512x fewer faults, and a fresh process's first restore comes
// close to a warm one (docs/BENCHMARKS.md, "the first touch on hugetlb pages").
enum class HugePages : uint8_t {
  kOff,   // a POSIX shm object
  kAuto,  // hugetlb pages if the machine has enough free, else kOff's object
  kOn,    // hugetlb pages or ResourceExhausted
};
// "auto", "on", "off" (flags); InvalidArgument naming the choices otherwise.
absl::StatusOr<HugePages> ParseHugePages(absl::string_view name);

class ShmBuffer {
 public:
  // Creates "/kvtier-client-<pid>-<n>" (or `name`) of `size` bytes, mode 0600.
  // With hugetlb pages (`huge`) the buffer is an unnamed memfd whose object
  // is `size` rounded up to 2 MiB: it can be registered by descriptor only
  // (Client::RegisterBuffer does), and `name` is only its label.
  static absl::StatusOr<std::unique_ptr<ShmBuffer>> Create(uint64_t size, std::string name = "",
                                                           HugePages huge = HugePages::kOff);

  // Memory the process already holds (an engine's KV cache tensors), made
  // registrable without moving it: the whole pages inside each region are
  // copied into a new object, which is then mapped over them at the same
  // addresses (MAP_FIXED), so pointers into them stay valid and now point at
  // memory the daemon can map. The partial pages at a region's ends stay
  // private (other allocations may share them). Call it before other threads
  // write the regions: a write between the copy and the remap is lost.
  // The remapped memory stays the caller's after the ShmBuffer is gone.
  struct Region {
    const void* address = nullptr;
    uint64_t size = 0;
  };
  struct SharedRange {
    uint64_t address = 0;  // first shared byte of the region (page-aligned)
    uint64_t size = 0;     // 0 when the region holds no whole page
    uint64_t offset = 0;   // where those bytes are in the buffer
  };
  // One SharedRange per region, in order. InvalidArgument for empty or
  // overlapping regions.
  static absl::StatusOr<std::unique_ptr<ShmBuffer>> Share(absl::Span<const Region> regions,
                                                          std::vector<SharedRange>* shared);
  // Undoes Share: each range becomes private memory again holding the same
  // bytes (moved, not copied twice). Call it once the daemon no longer uses
  // the buffer and before the memory is freed: an allocator that reuses
  // freed memory assumes what it gets back from the kernel is private (and
  // zeroed where it trimmed it), which shared pages are not.
  static absl::Status Unshare(absl::Span<const SharedRange> shared);
  ~ShmBuffer();
  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The shm name; empty for a hugetlb buffer (it has none).
  const std::string& name() const { return name_; }
  bool huge_pages() const { return huge_; }
  // The object's descriptor, kept open so the buffer can be handed to the
  // daemon by fd (Client::RegisterBuffer); close-on-exec.
  int fd() const { return fd_; }

 private:
  ShmBuffer(std::string name, int fd, uint8_t* data, uint64_t size, uint64_t mapped, bool huge)
      : name_(std::move(name)), fd_(fd), data_(data), size_(size), mapped_(mapped), huge_(huge) {}
  static absl::StatusOr<std::unique_ptr<ShmBuffer>> CreateHuge(uint64_t size);
  std::string name_;
  int fd_;
  uint8_t* data_;
  uint64_t size_;
  uint64_t mapped_;  // the mapping's length (size_ rounded up to a hugetlb page)
  bool huge_;
};

}  // namespace kvtier
