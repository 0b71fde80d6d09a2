// Client-side shared-memory arenas.
#include "kvtier/shm_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"

namespace kvtier {

namespace {

constexpr uint64_t kHugePageBytes = 2ull << 20;  // the default hugetlb page size (x86-64, arm64)

}  // namespace

absl::StatusOr<HugePages> ParseHugePages(absl::string_view name) {
  if (name == "auto") return HugePages::kAuto;
  if (name == "on") return HugePages::kOn;
  if (name == "off") return HugePages::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown hugepages mode '", name, "' (choices: auto, on, off)"));
}

absl::StatusOr<std::unique_ptr<ShmBuffer>> ShmBuffer::CreateHuge(uint64_t size) {
  if (size > UINT64_MAX - kHugePageBytes)
    return absl::InvalidArgumentError("shm buffer size too large");
  const uint64_t mapped = (size + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  int fd = memfd_create("kvtier-client", MFD_HUGETLB | MFD_CLOEXEC);
  if (fd < 0)
    return absl::ResourceExhaustedError(
        absl::StrCat("memfd_create(MFD_HUGETLB): ", strerror(errno)));
  // MAP_SHARED on hugetlbfs reserves the pages at mmap, so too few free
  // hugetlb pages fail here, not later with a SIGBUS on first touch.
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(mapped)) == 0)
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "no ", mapped / kHugePageBytes, " free 2 MiB hugetlb pages for a ", size,
        "-byte buffer (vm.nr_hugepages; /proc/meminfo HugePages_Free): ", strerror(err)));
  }
  return std::unique_ptr<ShmBuffer>(
      new ShmBuffer("", fd, static_cast<uint8_t*>(p), size, mapped, /*huge=*/true));
}

absl::StatusOr<std::unique_ptr<ShmBuffer>> ShmBuffer::Create(uint64_t size, std::string name,
                                                             HugePages huge) {
  static std::atomic<uint64_t> seq{0};
  if (size == 0) return absl::InvalidArgumentError("shm buffer size must be > 0");
  if (huge != HugePages::kOff) {
    absl::StatusOr<std::unique_ptr<ShmBuffer>> b = CreateHuge(size);
    if (b.ok() || huge == HugePages::kOn) return b;
  }
  const bool generated = name.empty();
  int fd = -1;
  // A generated name may already exist: an object a killed process of the
  // same pid left behind (pids wrap). It is not ours to remove, so take the
  // next name instead; a name the caller chose fails as it is.
  for (int attempt = 0; fd < 0; ++attempt) {
    if (generated) name = absl::StrCat("/kvtier-client-", getpid(), "-", seq++);
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && (!generated || errno != EEXIST || attempt >= 1000))
      return absl::FailedPreconditionError(
          absl::StrCat("shm_open(", name, "): ", strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("ftruncate(", name, ", ", size, "): ", strerror(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  if (p == MAP_FAILED) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap(", name, "): ", strerror(err)));
  }
  return std::unique_ptr<ShmBuffer>(
      new ShmBuffer(name, fd, static_cast<uint8_t*>(p), size, size, /*huge=*/false));
}

absl::StatusOr<std::unique_ptr<ShmBuffer>> ShmBuffer::Share(absl::Span<const Region> regions,
                                                            std::vector<SharedRange>* shared) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<SharedRange> out(regions.size());
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) of each region
  uint64_t total = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto a = reinterpret_cast<uint64_t>(regions[i].address);
    if (regions[i].address == nullptr || regions[i].size == 0 || a + regions[i].size < a)
      return absl::InvalidArgumentError(absl::StrCat("ShmBuffer::Share: region ", i, " is empty"));
    spans.emplace_back(a, a + regions[i].size);
    const uint64_t begin = (a + page - 1) / page * page, end = (a + regions[i].size) / page * page;
    if (end > begin) out[i] = SharedRange{begin, end - begin, total};
    total += out[i].size;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      return absl::InvalidArgumentError("ShmBuffer::Share: two regions overlap");
  if (total == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("ShmBuffer::Share: no region holds a whole ", page, "-byte page"));
  ASSIGN_OR_RETURN(std::unique_ptr<ShmBuffer> buf, Create(total));
  for (const SharedRange& r : out) {
    if (r.size == 0) continue;
    auto* at = reinterpret_cast<void*>(r.address);
    std::memcpy(buf->data_ + r.offset, at, r.size);
    if (mmap(at, r.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, buf->fd_,
             static_cast<off_t>(r.offset)) == MAP_FAILED)
      // The regions remapped so far hold the same bytes as before: still
      // the caller's memory, only shared with an unlinked object.
      return absl::InternalError(absl::StrCat("ShmBuffer::Share: mmap over ", r.size,
                                              " bytes at ", r.address, ": ", strerror(errno)));
  }
  *shared = std::move(out);
  return buf;
}

absl::Status ShmBuffer::Unshare(absl::Span<const SharedRange> shared) {
  for (const SharedRange& r : shared) {
    if (r.size == 0) continue;
    // A private copy elsewhere, moved over the shared pages in one step.
    void* copy = mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
      return absl::ResourceExhaustedError(
          absl::StrCat("ShmBuffer::Unshare: mmap of ", r.size, " bytes: ", strerror(errno)));
    std::memcpy(copy, reinterpret_cast<const void*>(r.address), r.size);
    if (mremap(copy, r.size, r.size, MREMAP_MAYMOVE | MREMAP_FIXED,
               reinterpret_cast<void*>(r.address)) == MAP_FAILED) {
      const int err = errno;
      munmap(copy, r.size);
      return absl::InternalError(absl::StrCat("ShmBuffer::Unshare: mremap over ", r.size,
                                              " bytes at ", r.address, ": ", strerror(err)));
    }
  }
  return absl::OkStatus();
}

ShmBuffer::~ShmBuffer() {
  munmap(data_, mapped_);
  close(fd_);
  if (!name_.empty()) shm_unlink(name_.c_str());
}

}  // namespace kvtier
