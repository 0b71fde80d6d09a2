// The fault-injecting wrapper for tests: counts reads and writes and fails the
// Nth one as FaultControl says (EIO, ENOSPC, short transfer, torn write).
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tiers/nvme/device.h"
#include "tiers/nvme/io_engine.h"

namespace kvtier::tiers::nvme {

void FaultControl::Set(FaultSpec spec) {
  absl::MutexLock lock(&mu_);
  spec_ = spec;
  reads_ = writes_ = flushes_ = 0;
}
FaultSpec FaultControl::spec() const {
  absl::MutexLock lock(&mu_);
  return spec_;
}
uint64_t FaultControl::reads_seen() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}
uint64_t FaultControl::writes_seen() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}
uint64_t FaultControl::faults_injected() const {
  absl::MutexLock lock(&mu_);
  return injected_;
}

namespace {
// Whether the `count`th I/O hits a fault set for the `n`th.
bool Hits(uint64_t count, uint64_t n, bool sticky) {
  return n != 0 && (count == n || (sticky && count > n));
}
}  // namespace

FaultKind FaultControl::NextRead() {
  absl::MutexLock lock(&mu_);
  if (!Hits(++reads_, spec_.fail_read_n, spec_.sticky)) return FaultKind::kNone;
  ++injected_;
  // A read cannot tear; treat a torn-write spec on reads as EIO.
  return spec_.read_fault == FaultKind::kTornWrite ? FaultKind::kEio : spec_.read_fault;
}

FaultKind FaultControl::NextWrite() {
  absl::MutexLock lock(&mu_);
  if (!Hits(++writes_, spec_.fail_write_n, spec_.sticky)) return FaultKind::kNone;
  ++injected_;
  return spec_.write_fault;
}

bool FaultControl::NextFlushFails() {
  absl::MutexLock lock(&mu_);
  if (!Hits(++flushes_, spec_.fail_flush_n, spec_.sticky)) return false;
  ++injected_;
  return true;
}

namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;
AlignedBuf Alloc(uint64_t n) {
  return AlignedBuf(static_cast<char*>(std::aligned_alloc(kBlockSize, n)));
}

class FaultInjectingDevice final : public Device {
 public:
  FaultInjectingDevice(std::unique_ptr<Device> inner, std::shared_ptr<FaultControl> control)
      : Device(inner->size()), inner_(std::move(inner)), control_(std::move(control)) {}

  absl::Status RegisterBufferRegion(void* base, uint64_t len) override {
    return inner_->RegisterBufferRegion(base, len);
  }
  std::string Describe() const override {
    return absl::StrCat("fault-injecting(", inner_->Describe(), ")");
  }

 protected:
  absl::Status ReadImpl(uint64_t offset, void* buf, uint64_t n) override {
    FaultKind kind = control_->NextRead();
    if (kind == FaultKind::kNone) return inner_->Read(offset, buf, n);
    if (kind != FaultKind::kShortIo) return Injected(kind, false, offset, n);
    AlignedBuf tmp = Alloc(n);
    absl::Status s = inner_->Read(offset, tmp.get(), n);
    if (!s.ok()) return s;
    std::memcpy(buf, tmp.get(), n / 2);
    return Injected(kind, false, offset, n);
  }

  absl::Status WriteImpl(uint64_t offset, const void* buf, uint64_t n) override {
    FaultKind kind = control_->NextWrite();
    if (kind == FaultKind::kNone) return inner_->Write(offset, buf, n);
    if (kind != FaultKind::kShortIo && kind != FaultKind::kTornWrite) {
      return Injected(kind, true, offset, n);
    }
    // Land the first half of the new bytes over the old contents.
    AlignedBuf tmp = Alloc(n);
    absl::Status s = inner_->Read(offset, tmp.get(), n);
    if (!s.ok()) return s;
    std::memcpy(tmp.get(), buf, n / 2);
    s = inner_->Write(offset, tmp.get(), n);
    if (!s.ok()) return s;
    return Injected(kind, true, offset, n);
  }

  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, IoCallback cb) override {
    FaultKind kind = control_->NextRead();
    if (kind == FaultKind::kNone) return inner_->ReadAsync(offset, buf, n, std::move(cb));
    if (kind != FaultKind::kShortIo) return cb(Injected(kind, false, offset, n));
    auto tmp = std::shared_ptr<char>(Alloc(n));
    inner_->ReadAsync(offset, tmp.get(), n, [=, this, cb = std::move(cb)](absl::Status s) {
      if (!s.ok()) return cb(std::move(s));
      std::memcpy(buf, tmp.get(), n / 2);
      cb(Injected(kind, false, offset, n));
    });
  }

  void WriteAsyncImpl(uint64_t offset, const void* buf, uint64_t n, IoCallback cb) override {
    FaultKind kind = control_->NextWrite();
    if (kind == FaultKind::kNone) return inner_->WriteAsync(offset, buf, n, std::move(cb));
    if (kind != FaultKind::kShortIo && kind != FaultKind::kTornWrite) {
      return cb(Injected(kind, true, offset, n));
    }
    auto tmp = std::shared_ptr<char>(Alloc(n));
    inner_->ReadAsync(offset, tmp.get(), n, [=, this, cb = std::move(cb)](absl::Status s) {
      if (!s.ok()) return cb(std::move(s));
      std::memcpy(tmp.get(), buf, n / 2);
      // `tmp` must live until this write completes: capture it explicitly.
      inner_->WriteAsync(offset, tmp.get(), n,
                         [this, tmp, kind, offset, n, cb = std::move(cb)](absl::Status s) {
                           cb(s.ok() ? Injected(kind, true, offset, n) : std::move(s));
                         });
    });
  }

  absl::Status FlushImpl() override {
    if (control_->NextFlushFails()) return absl::UnavailableError("fdatasync: injected fault (EIO)");
    return inner_->Flush();
  }

 private:
  // The status an injected fault reports (OK for a silent torn write).
  absl::Status Injected(FaultKind kind, bool write, uint64_t offset, uint64_t n) const {
    const std::string what = "injected fault";
    switch (kind) {
      case FaultKind::kEnospc:
        return internal::IoErrnoStatus(ENOSPC, what, write, offset, n);
      case FaultKind::kShortIo:
        return internal::ShortIoStatus(what, write, offset, n, n / 2);
      case FaultKind::kTornWrite:
        if (control_->spec().torn_write_reports_ok) return absl::OkStatus();
        [[fallthrough]];
      default:
        return internal::IoErrnoStatus(EIO, what, write, offset, n);
    }
  }

  std::unique_ptr<Device> inner_;
  std::shared_ptr<FaultControl> control_;
};

}  // namespace

std::unique_ptr<Device> CreateFaultInjectingDevice(std::unique_ptr<Device> inner,
                                                   std::shared_ptr<FaultControl> control) {
  if (control == nullptr) control = std::make_shared<FaultControl>();
  return std::make_unique<FaultInjectingDevice>(std::move(inner), std::move(control));
}

}  // namespace kvtier::tiers::nvme
