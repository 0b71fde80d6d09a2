// EmulatedDevice: "device memory" is host memory in POSIX shared-memory
// objects, so that its IPC handles (the object names) really let a second
// process map the same bytes, as CUDA IPC does. Copies run on one worker
// thread per stream, in order, and complete through the same callbacks as
// on a GPU. Device-side pointers are checked against the live allocations
// and imports, the way the CUDA driver rejects stray pointers.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/sigbus_guard.h"
#include "tiers/hbm/device.h"

namespace kvtier::tiers::hbm {
namespace {

struct Mapping {
  uint64_t bytes = 0;
  std::string name;  // non-empty for our own allocations (unlinked on Free)
  bool imported = false;
};

class EmulatedDevice final : public Device {
 public:
  explicit EmulatedDevice(const EmulatedDeviceConfig& config) : config_(config) {
    InstallSigbusGuard();  // copies over client memory run under GuardedRun
    const int n = std::max(1, config.streams);
    streams_.reserve(n);
    for (int i = 0; i < n; ++i) streams_.push_back(std::make_unique<Stream>());
    for (auto& s : streams_) s->worker = std::thread([this, st = s.get()] { Run(*st); });
  }

  ~EmulatedDevice() override {
    for (auto& s : streams_) {
      absl::MutexLock lock(&s->mu);
      s->stop = true;
    }
    for (auto& s : streams_) s->worker.join();
    absl::MutexLock lock(&mu_);
    for (auto& [base, m] : maps_) {
      munmap(base, m.bytes);
      if (!m.name.empty() && !m.imported) shm_unlink(m.name.c_str());  // imports are not ours
    }
  }

  std::string description() const override { return "emulated (host memory)"; }
  bool emulated() const override { return true; }
  int streams() const override { return static_cast<int>(streams_.size()); }

  absl::StatusOr<void*> Allocate(uint64_t bytes, bool exportable) override {
    static std::atomic<uint64_t> seq{0};
    if (bytes == 0) return absl::InvalidArgumentError("device allocation of 0 bytes");
    std::string name = absl::StrCat("/kvtier-emu-", getpid(), "-", seq++);
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
      return absl::ResourceExhaustedError(absl::StrCat("emulated device: shm_open(", name,
                                                       "): ", strerror(errno)));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int err = errno;
      close(fd);
      shm_unlink(name.c_str());
      return absl::ResourceExhaustedError(absl::StrCat("emulated device: cannot size ", name,
                                                       " to ", bytes, " bytes: ", strerror(err)));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(name.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("emulated device: mmap of ", bytes, " bytes: ", strerror(err)));
    }
    if (!exportable) {
      shm_unlink(name.c_str());
      name.clear();
    }
    absl::MutexLock lock(&mu_);
    maps_[static_cast<uint8_t*>(p)] = Mapping{bytes, std::move(name), false};
    return p;
  }

  void Free(void* ptr) override { Unmap(ptr, /*imported=*/false); }

  absl::Status RegisterHost(void* base, uint64_t bytes) override { return absl::OkStatus(); }
  void UnregisterHost(void* base) override {}

  absl::Status CopyAsync(CopyKind kind, std::vector<CopyRange> ranges, int stream,
                         CopyDone done) override {
    for (const CopyRange& r : ranges) {
      const bool dst_dev = kind != CopyKind::kDeviceToHost;
      const bool src_dev = kind != CopyKind::kHostToDevice;
      if (dst_dev && !IsDevice(r.dst, r.bytes))
        return absl::InvalidArgumentError(absl::StrCat(
            "emulated device: ", CopyKindName(kind), " destination 0x", absl::Hex(reinterpret_cast<uintptr_t>(r.dst)), " +", r.bytes,
            " is not inside device memory"));
      if (src_dev && !IsDevice(r.src, r.bytes))
        return absl::InvalidArgumentError(absl::StrCat(
            "emulated device: ", CopyKindName(kind), " source 0x", absl::Hex(reinterpret_cast<uintptr_t>(r.src)), " +", r.bytes,
            " is not inside device memory"));
    }
    Stream& s = *streams_[static_cast<size_t>(stream) % streams_.size()];
    absl::MutexLock lock(&s.mu);
    s.queue.push_back(Batch{std::move(ranges), std::move(done)});
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ExportHandle(void* ptr) override {
    absl::MutexLock lock(&mu_);
    auto it = maps_.find(static_cast<uint8_t*>(ptr));
    if (it == maps_.end() || it->second.imported || it->second.name.empty())
      return absl::InvalidArgumentError(
          "emulated device: export of a pointer that is not the start of an exportable "
          "allocation");
    return it->second.name;
  }

  absl::StatusOr<ImportedMemory> ImportHandle(const std::string& handle,
                                              uint64_t bytes) override;

  void CloseImported(const ImportedMemory& memory) override {
    Unmap(memory.ptr, /*imported=*/true);
  }

 private:
  struct Batch {
    std::vector<CopyRange> ranges;
    CopyDone done;
  };
  struct Stream {
    absl::Mutex mu;
    std::deque<Batch> queue ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread worker;
  };

  void Run(Stream& s) {
    for (;;) {
      Batch b;
      {
        absl::MutexLock lock(&s.mu);
        auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
          return s.stop || !s.queue.empty();
        };
        s.mu.Await(absl::Condition(&ready));
        if (s.queue.empty()) return;  // stopping and drained
        b = std::move(s.queue.front());
        s.queue.pop_front();
      }
      absl::Status status;
      for (const CopyRange& r : b.ranges) {
        if (config_.copy_delay_us > 0)
          std::this_thread::sleep_for(std::chrono::microseconds(config_.copy_delay_us));
        // Either side may be a client's shm mapping (its buffer, or memory
        // it exported) that it shrank meanwhile: a fault fails the batch.
        if (!GuardedRun([&] { std::memmove(r.dst, r.src, r.bytes); })) {
          status = absl::FailedPreconditionError(
              "emulated device copy touched memory its owner truncated (a client shrank its "
              "buffer)");
          break;
        }
      }
      if (b.done) b.done(status);
    }
  }

  bool IsDevice(const void* p, uint64_t n) const {
    const auto* q = static_cast<const uint8_t*>(p);
    absl::MutexLock lock(&mu_);
    auto it = maps_.upper_bound(const_cast<uint8_t*>(q));
    if (it == maps_.begin()) return false;
    --it;
    const uint64_t off = static_cast<uint64_t>(q - it->first);
    return off <= it->second.bytes && n <= it->second.bytes - off;
  }

  void Unmap(void* ptr, bool imported) {
    Mapping m;
    {
      absl::MutexLock lock(&mu_);
      auto it = maps_.find(static_cast<uint8_t*>(ptr));
      if (it == maps_.end() || it->second.imported != imported) return;
      m = std::move(it->second);
      maps_.erase(it);
    }
    munmap(ptr, m.bytes);
    if (!m.name.empty() && !imported) shm_unlink(m.name.c_str());
  }

  const EmulatedDeviceConfig config_;
  std::vector<std::unique_ptr<Stream>> streams_;
  mutable absl::Mutex mu_;
  std::map<uint8_t*, Mapping> maps_ ABSL_GUARDED_BY(mu_);  // by base address
};

absl::StatusOr<ImportedMemory> EmulatedDevice::ImportHandle(const std::string& handle,
                                                            uint64_t bytes) {
  if (handle.size() < 2 || handle[0] != '/' || handle.find('/', 1) != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated device handle '", handle.substr(0, 64), "' must be a shm name \"/name\""));
  if (bytes == 0) return absl::InvalidArgumentError("emulated device import of 0 bytes");
  int fd = shm_open(handle.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int err = errno;
    std::string msg = absl::StrCat("emulated device: cannot open '", handle, "': ", strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("emulated device memory '", handle, "' is ",
                                                   st.st_size, " bytes, smaller than ", bytes));
  }
  // No MAP_POPULATE: a client's (possibly sparse) object must not be
  // faulted in by the daemon at registration.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(
        absl::StrCat("emulated device: cannot map '", handle, "': ", strerror(err)));
  absl::MutexLock lock(&mu_);
  maps_[static_cast<uint8_t*>(p)] = Mapping{bytes, handle, true};
  return ImportedMemory{p, bytes, static_cast<uint64_t>(st.st_dev),
                        static_cast<uint64_t>(st.st_ino)};
}

}  // namespace

std::shared_ptr<Device> CreateEmulatedDevice(const EmulatedDeviceConfig& config) {
  return std::make_shared<EmulatedDevice>(config);
}

}  // namespace kvtier::tiers::hbm
