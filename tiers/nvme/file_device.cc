// The file device: opens (creating) and preallocates the backing file or
// block device with O_DIRECT, refuses tmpfs with a clear error, and hands
// async I/O to the io_uring engine (thread-pool fallback). Sync I/O is
// pread/pwrite on the caller's thread: at depth one that is the lowest latency.
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tiers/nvme/device.h"
#include "tiers/nvme/io_engine.h"

namespace kvtier::tiers::nvme {

absl::Status FileDeviceConfig::Validate() const {
  if (path.empty()) return absl::InvalidArgumentError("nvme device: empty path");
  if (size == 0 || size % kBlockSize != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "nvme device %s: size %u is not a positive multiple of %u", path, size, kBlockSize));
  }
  if (io_threads == 0 || io_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nvme device %s: io_threads %u not in [1, 64]", path, io_threads));
  }
  if (queue_depth == 0 || queue_depth > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "nvme device %s: queue_depth %u not in [1, 4096]", path, queue_depth));
  }
  // Written as !(x > 0 && x <= 1) so a NaN is refused too.
  if (!(prefetch_share > 0 && prefetch_share <= 1) ||
      !(writeback_share > 0 && writeback_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "nvme device %s: prefetch_share %g and writeback_share %g must be in (0, 1]", path,
        prefetch_share, writeback_share));
  }
  return absl::OkStatus();
}

namespace {

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(n);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.4g %s", v, units[u]);
}

// Errors of opening/creating, by errno, naming `path`.
absl::Status OpenError(int err, const std::string& path, absl::string_view doing) {
  std::string msg = absl::StrCat(path, ": ", doing, ": ", std::strerror(err));
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(
          absl::StrCat(msg, " (the NVMe tier needs a writable directory)"));
    case ENOTDIR:
    case EISDIR:
      return absl::FailedPreconditionError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::Status(absl::ErrnoToStatusCode(err), msg);
  }
}

struct BackingFile {
  int fd = -1;
  std::string sizing;  // how the size was provided, for Describe()
};

absl::StatusOr<BackingFile> OpenBlockDevice(const FileDeviceConfig& c) {
  const int fd = ::open(c.path.c_str(), O_RDWR | O_CLOEXEC | (c.direct ? O_DIRECT : 0));
  if (fd < 0) return OpenError(errno, c.path, "cannot open block device");
  uint64_t bytes = 0;
  if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0 || bytes < c.size) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: block device has %u bytes, %u wanted", c.path, bytes, c.size));
  }
  return BackingFile{fd, "block device"};
}

// Preallocates [0, size): fallocate, or ftruncate where the file system has
// no fallocate.
absl::StatusOr<std::string> Preallocate(int fd, const FileDeviceConfig& c) {
  if (::fallocate(fd, 0, 0, static_cast<off_t>(c.size)) == 0) {
    return std::string("preallocated with fallocate");
  }
  const int err = errno;
  if (err != EOPNOTSUPP && err != ENOSYS) {
    return OpenError(err, c.path, absl::StrCat("cannot preallocate ", HumanBytes(c.size)));
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= c.size) {
    return std::string("sparse, existing size (fallocate unsupported)");
  }
  if (::ftruncate(fd, static_cast<off_t>(c.size)) != 0) {
    return OpenError(errno, c.path, "cannot size the file (ftruncate)");
  }
  return std::string("sparse, sized with ftruncate (fallocate unsupported)");
}

absl::StatusOr<BackingFile> OpenBackingFile(const FileDeviceConfig& c) {
  struct stat st;
  const bool existed = ::stat(c.path.c_str(), &st) == 0;
  if (existed && S_ISBLK(st.st_mode)) return OpenBlockDevice(c);
  if (existed && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(c.path, ": not a regular file or block device"));
  }
  std::filesystem::path dir = std::filesystem::path(c.path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return OpenError(ec.value(), dir.string(), "cannot create directory");
  struct statfs fs;
  if (c.direct && !c.allow_tmpfs && ::statfs(dir.c_str(), &fs) == 0 &&
      (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
    return absl::FailedPreconditionError(absl::StrCat(
        c.path, ": the directory is on tmpfs/ramfs (memory, not a disk); put the NVMe tier on "
        "a real disk"));
  }
  const int flags = O_RDWR | O_CREAT | O_CLOEXEC | (c.direct ? O_DIRECT : 0);
  // Page bytes and keys are tenants' data: this user only.
  const int fd = ::open(c.path.c_str(), flags, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL && c.direct) {
      if (!existed) ::unlink(c.path.c_str());  // some kernels create it first
      return absl::FailedPreconditionError(absl::StrCat(
          c.path, ": the file system refuses O_DIRECT (tmpfs?); put the NVMe tier on a real "
          "disk"));
    }
    return OpenError(err, c.path, existed ? "cannot open for writing" : "cannot create");
  }
  // A data file from an older kvtier may be 0644: it is ours, make it private.
  struct stat own;
  if (existed && ::fstat(fd, &own) == 0 && own.st_uid == ::geteuid() && (own.st_mode & 077) != 0)
    (void)::fchmod(fd, 0600);
  absl::StatusOr<std::string> sizing = Preallocate(fd, c);
  if (!sizing.ok()) {
    ::close(fd);
    if (!existed) ::unlink(c.path.c_str());
    return sizing.status();
  }
  return BackingFile{fd, *std::move(sizing)};
}

class FileDevice final : public Device {
 public:
  FileDevice(const FileDeviceConfig& c, BackingFile file, std::unique_ptr<internal::IoEngine> engine,
             std::string engine_note)
      : Device(c.size),
        config_(c),
        file_(std::move(file)),
        engine_(std::move(engine)),
        engine_note_(std::move(engine_note)) {}
  ~FileDevice() override {
    engine_.reset();  // drains in-flight I/O before the fd goes away
    ::close(file_.fd);
  }

  absl::Status RegisterBufferRegion(void* base, uint64_t len) override {
    absl::Status s = Device::RegisterBufferRegion(base, len);
    if (!s.ok()) return s;
    return engine_->RegisterBufferRegion(base, len);
  }

  std::string Describe() const override {
    return absl::StrFormat("file %s (%s, %s, %s) via %s%s", config_.path, HumanBytes(size()),
                           config_.direct ? "O_DIRECT" : "buffered", file_.sizing,
                           engine_->Describe(), engine_note_);
  }

 protected:
  absl::Status ReadImpl(uint64_t offset, void* buf, uint64_t n) override {
    return internal::PositionalIo(file_.fd, config_.path, false, offset,
                                  static_cast<char*>(buf), n);
  }
  absl::Status WriteImpl(uint64_t offset, const void* buf, uint64_t n) override {
    return internal::PositionalIo(file_.fd, config_.path, true, offset,
                                  const_cast<char*>(static_cast<const char*>(buf)), n);
  }
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, IoCallback cb) override {
    Submit(false, offset, static_cast<char*>(buf), n, std::move(cb));
  }
  void WriteAsyncImpl(uint64_t offset, const void* buf, uint64_t n, IoCallback cb) override {
    Submit(true, offset, const_cast<char*>(static_cast<const char*>(buf)), n, std::move(cb));
  }
  absl::Status FlushImpl() override {
    if (::fdatasync(file_.fd) == 0) return absl::OkStatus();
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat(config_.path, ": fdatasync: ", std::strerror(err)));
  }

 private:
  void Submit(bool write, uint64_t offset, char* buf, uint64_t n, IoCallback cb) {
    auto req = std::make_unique<internal::IoRequest>();
    req->write = write;
    req->offset = offset;
    req->buf = buf;
    req->n = n;
    req->cls = CurrentIoClass();  // the issuing thread's: see Device::ReadAsync
    req->urgency = CurrentIoUrgency();
    req->cb = std::move(cb);
    engine_->Submit(std::move(req));
  }

  const FileDeviceConfig config_;
  BackingFile file_;
  std::unique_ptr<internal::IoEngine> engine_;
  const std::string engine_note_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> CreateFileDevice(const FileDeviceConfig& config) {
  absl::Status s = config.Validate();
  if (!s.ok()) return s;
  absl::StatusOr<BackingFile> file = OpenBackingFile(config);
  if (!file.ok()) return file.status();
  std::unique_ptr<internal::IoEngine> engine;
  std::string note;
  if (config.engine != IoEngineKind::kThreadPool) {
    auto uring = internal::CreateUringEngine(file->fd, config.path, config);
    if (uring.ok()) {
      engine = *std::move(uring);
    } else if (config.engine == IoEngineKind::kIoUring) {
      ::close(file->fd);
      return absl::Status(uring.status().code(),
                          absl::StrCat(config.path, ": io_uring unavailable: ",
                                       uring.status().message()));
    } else {
      note = absl::StrCat(" (io_uring unavailable: ", uring.status().message(), ")");
    }
  }
  if (engine == nullptr) engine = internal::CreateThreadPoolEngine(file->fd, config.path, config);
  return std::unique_ptr<Device>(
      std::make_unique<FileDevice>(config, *std::move(file), std::move(engine), std::move(note)));
}

}  // namespace kvtier::tiers::nvme
