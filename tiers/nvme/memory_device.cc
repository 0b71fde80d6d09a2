// The in-memory twin of the file device: anonymous memory, synchronous
// memcpy, async completions on one private thread (so callers see the same
// threading as with a real device).
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "tiers/nvme/device.h"
#include "tiers/nvme/worker_pool.h"

namespace kvtier::tiers::nvme {
namespace {

// At least one block, so even a zero-size request gets a valid mapping.
uint64_t RoundUp(uint64_t v) {
  return v == 0 ? kBlockSize : (v + kBlockSize - 1) / kBlockSize * kBlockSize;
}

class MemoryDevice final : public Device {
 public:
  explicit MemoryDevice(uint64_t size) : Device(RoundUp(size)) {
    void* p = ::mmap(nullptr, this->size(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    // Out of address space is not recoverable for a test twin.
    if (p == MAP_FAILED) std::abort();
    data_ = static_cast<char*>(p);
    completions_.emplace(1);
  }
  ~MemoryDevice() override {
    completions_.reset();  // drains pending callbacks first
    ::munmap(data_, size());
  }

  std::string Describe() const override {
    return absl::StrFormat("memory (%u bytes)", size());
  }

 protected:
  absl::Status ReadImpl(uint64_t offset, void* buf, uint64_t n) override {
    std::memcpy(buf, data_ + offset, n);
    return absl::OkStatus();
  }
  absl::Status WriteImpl(uint64_t offset, const void* buf, uint64_t n) override {
    std::memcpy(data_ + offset, buf, n);
    return absl::OkStatus();
  }
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, IoCallback cb) override {
    completions_->Post([this, offset, buf, n, cb = std::move(cb)] {
      cb(ReadImpl(offset, buf, n));
    });
  }
  void WriteAsyncImpl(uint64_t offset, const void* buf, uint64_t n, IoCallback cb) override {
    completions_->Post([this, offset, buf, n, cb = std::move(cb)] {
      cb(WriteImpl(offset, buf, n));
    });
  }
  absl::Status FlushImpl() override { return absl::OkStatus(); }

 private:
  char* data_ = nullptr;
  std::optional<internal::WorkerPool> completions_;
};

}  // namespace

std::unique_ptr<Device> CreateMemoryDevice(uint64_t size) {
  return std::make_unique<MemoryDevice>(size);
}

}  // namespace kvtier::tiers::nvme
