// The block device under the NVMe tier: checked public I/O over a raw
// implementation (CacheLib navy/common/Device.h), with three implementations:
// a file/block device driven by io_uring (thread-pool pread/pwrite fallback),
// an in-memory twin for tests, and a fault-injecting wrapper for tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tiers/common/io_class.h"

namespace kvtier::tiers::nvme {

// Every offset, length and buffer address handed to a Device must be a
// multiple of this (O_DIRECT on any logical block size up to 4 KiB).
inline constexpr uint32_t kBlockSize = 4096;

// A snapshot of a device's counters. I/O counts include failed I/Os; byte
// counts only successful ones. Calls rejected by the argument checks count in
// `rejected` only.
struct DeviceStats {
  uint64_t reads = 0;           // reads issued (sync + async)
  uint64_t writes = 0;          // writes issued (sync + async)
  uint64_t bytes_read = 0;      // bytes of successful reads
  uint64_t bytes_written = 0;   // bytes of successful writes
  uint64_t read_errors = 0;     // reads that completed with an error
  uint64_t write_errors = 0;    // writes that completed with an error
  uint64_t rejected = 0;        // calls refused by the alignment/bounds checks
  uint64_t inflight = 0;        // I/Os issued and not yet completed, now
  uint64_t max_inflight = 0;    // high-water mark of `inflight`
  // Async I/Os by class (tiers/common/io_class.h: the issuing thread's) and the sum
  // of their submit-to-completion times, for mean latency per class.
  uint64_t class_ios[kIoClasses] = {};
  uint64_t class_latency_us[kIoClasses] = {};
};

// Completion callback of an asynchronous I/O. It runs exactly once, either on
// the calling thread before ReadAsync/WriteAsync returns (argument errors,
// injected faults, the memory device) or on one of the device's I/O threads.
// It must be quick and must not block: the I/O thread stops reaping
// completions while it runs. Issuing another ReadAsync/WriteAsync from a
// callback is allowed and cheap. Do not hold, while calling ReadAsync/
// WriteAsync, a lock that the callback takes.
using IoCallback = std::function<void(absl::Status)>;

// A fixed-size, block-addressed byte store. All methods are thread-safe.
// Buffers are owned by the caller; for an async I/O the caller keeps the
// buffer alive and untouched until the callback has run. Concurrent writes to
// overlapping ranges, or a read overlapping an in-flight write, give
// unspecified bytes (as on a disk). Destroying a device waits for every
// in-flight I/O to complete (their callbacks run); issuing new I/O while the
// destructor runs is a bug.
class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Usable bytes; a multiple of kBlockSize.
  uint64_t size() const { return size_; }

  // Synchronous I/O on the calling thread. `offset`, `n` and `buf` must be
  // multiples of kBlockSize and n > 0 (else InvalidArgument naming which),
  // and [offset, offset + n) must lie within size() (else OutOfRange).
  // Errors from the medium: ResourceExhausted (ENOSPC), DataLoss (EIO, or a
  // short transfer that made no progress), others per errno; messages carry
  // the device, offset, length and strerror.
  absl::Status Read(uint64_t offset, void* buf, uint64_t n);
  absl::Status Write(uint64_t offset, const void* buf, uint64_t n);

  // Asynchronous I/O with the same checks and error mapping; `cb` receives
  // the result (see IoCallback for where it runs). A short transfer is
  // resubmitted for the remainder; only one that makes no progress fails.
  // The I/O's class is the calling thread's CurrentIoClass(): the io_uring
  // engine serves demand before prefetch before write-back
  // (FileDeviceConfig's shares).
  void ReadAsync(uint64_t offset, void* buf, uint64_t n, IoCallback cb);
  void WriteAsync(uint64_t offset, const void* buf, uint64_t n, IoCallback cb);

  // Makes every write that has completed so far durable (fdatasync for a
  // file; a no-op for memory). Blocks the calling thread.
  absl::Status Flush();

  // Tells the device that [base, base + len) is a long-lived I/O buffer area
  // (e.g. the host tier's shm arena) so the io_uring engine can register it
  // and use fixed-buffer reads/writes for I/O that lies inside it. Optional
  // and best-effort: returns OK and keeps using plain I/O when the kernel
  // refuses (RLIMIT_MEMLOCK, too many regions); InvalidArgument only for a
  // null/empty region. The region must stay mapped until the device is
  // destroyed. Thread-safe, but meant to be called at start-up.
  virtual absl::Status RegisterBufferRegion(void* base, uint64_t len);

  DeviceStats stats() const;

  // One line for logs and `kvtierctl`, e.g. "file /data/kvtier/nvme.slab
  // (2 GiB, O_DIRECT, preallocated) via io_uring: 1 ring x 64 deep, ...".
  virtual std::string Describe() const = 0;

 protected:
  explicit Device(uint64_t size) : size_(size) {}

  // The raw I/O. Arguments are already checked. The async variants must call
  // `cb` exactly once. Subclasses must let in-flight async I/O finish in their
  // destructor (the base class holds no I/O state).
  virtual absl::Status ReadImpl(uint64_t offset, void* buf, uint64_t n) = 0;
  virtual absl::Status WriteImpl(uint64_t offset, const void* buf, uint64_t n) = 0;
  virtual void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, IoCallback cb) = 0;
  virtual void WriteAsyncImpl(uint64_t offset, const void* buf, uint64_t n,
                              IoCallback cb) = 0;
  virtual absl::Status FlushImpl() = 0;

 private:
  absl::Status Check(const char* op, uint64_t offset, const void* buf, uint64_t n);
  void Begin(bool write);
  void End(bool write, uint64_t n, const absl::Status& status);
  // Wraps an async callback to count its class and latency.
  IoCallback Timed(IoCallback cb);

  const uint64_t size_;
  std::atomic<uint64_t> reads_{0}, writes_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<uint64_t> read_errors_{0}, write_errors_{0}, rejected_{0};
  std::atomic<uint64_t> inflight_{0}, max_inflight_{0};
  std::atomic<uint64_t> class_ios_[kIoClasses] = {}, class_us_[kIoClasses] = {};
};

// ---- File / block device -------------------------------------------------

enum class IoEngineKind {
  kAuto,        // io_uring when the kernel allows it, else kThreadPool
  kIoUring,     // io_uring only; Create fails if it is unavailable
  kThreadPool,  // pread/pwrite on worker threads
};

struct FileDeviceConfig {
  // A regular file (created, with its directory, if missing) or a block
  // device such as /dev/nvme0n1p3.
  std::string path;
  // Bytes to use; a positive multiple of kBlockSize. A regular file is
  // preallocated to this size (fallocate; ftruncate where unsupported).
  uint64_t size = 0;
  // io_uring: one ring and one I/O thread per unit. Thread pool: worker count
  // is max(io_threads, min(queue_depth, 16)).
  uint32_t io_threads = 1;
  // In-flight I/Os per ring; further submissions wait in a queue.
  uint32_t queue_depth = 64;
  // I/O classes (io_uring engine; the thread-pool fallback is FIFO): queued
  // I/O is started demand first, then prefetch, then write-back. Prefetch
  // reads may fill at most this share of queue_depth (the rest stays free
  // for demand reads), and write-back at most `writeback_share` of it while
  // any read is queued or in flight (all of it when none is). In (0, 1];
  // each cap is at least one I/O.
  double prefetch_share = 0.25;
  double writeback_share = 0.125;
  // O_DIRECT (bypass the page cache). Off only for experiments.
  bool direct = true;
  IoEngineKind engine = IoEngineKind::kAuto;
  // Accept a directory on tmpfs/ramfs. Only for measuring the engine itself
  // (kvtier-nvme-bench --allow_tmpfs): a RAM-backed "NVMe" tier is a mistake.
  bool allow_tmpfs = false;

  absl::Status Validate() const;
};

// Opens (creating if needed) and preallocates the file, then starts the I/O
// engine. Errors name the path: FailedPrecondition for tmpfs or a file system
// that refuses O_DIRECT ("put the NVMe tier on a real disk"), PermissionDenied
// for an unwritable directory, ResourceExhausted when preallocation runs out
// of space, InvalidArgument for a bad config. Sync Read/Write use
// pread/pwrite on the calling thread; async I/O goes through the engine.
absl::StatusOr<std::unique_ptr<Device>> CreateFileDevice(const FileDeviceConfig& config);

// ---- In-memory twin ------------------------------------------------------

// `size` bytes of zeroed anonymous memory (rounded up to kBlockSize). Async
// callbacks run on one private completion thread, like a real device's.
std::unique_ptr<Device> CreateMemoryDevice(uint64_t size);

// ---- Fault injection (tests) ---------------------------------------------

enum class FaultKind {
  kNone,
  kEio,        // the I/O fails with EIO; no bytes move
  kEnospc,     // the I/O fails with ENOSPC; no bytes move
  kShortIo,    // only the first half of the bytes move; reported as DataLoss
  kTornWrite,  // writes only: the first half of the bytes land, the rest of
               // the range keeps its old bytes; reported per
               // torn_write_reports_ok (OK, or EIO). A read treats it as kEio.
};

struct FaultSpec {
  uint64_t fail_read_n = 0;   // fail the Nth read seen (1-based); 0 = never
  uint64_t fail_write_n = 0;  // fail the Nth write seen (1-based); 0 = never
  FaultKind read_fault = FaultKind::kEio;
  FaultKind write_fault = FaultKind::kEio;
  uint64_t fail_flush_n = 0;  // fail the Nth flush (fdatasync) seen with EIO; 0 = never
  bool sticky = false;                // also fail every I/O after the Nth
  bool torn_write_reports_ok = false;  // kTornWrite: silent (true) or EIO
};

// Shared between a test and its fault-injecting device; thread-safe.
// "Seen" counts every read/write that reached the wrapper (sync and async)
// since construction or the last Set().
class FaultControl {
 public:
  explicit FaultControl(FaultSpec spec = {}) : spec_(spec) {}

  // Replaces the spec and restarts the read/write counts.
  void Set(FaultSpec spec);
  FaultSpec spec() const;
  uint64_t reads_seen() const;
  uint64_t writes_seen() const;
  uint64_t faults_injected() const;

  // Counts one I/O and says which fault (if any) it gets.
  FaultKind NextRead();
  FaultKind NextWrite();
  bool NextFlushFails();

 private:
  mutable absl::Mutex mu_;
  FaultSpec spec_ ABSL_GUARDED_BY(mu_);
  uint64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flushes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
};

// Wraps `inner`, injecting the faults `control` describes. The wrapper owns
// `inner`; `control` may be changed by the test at any time.
std::unique_ptr<Device> CreateFaultInjectingDevice(std::unique_ptr<Device> inner,
                                                   std::shared_ptr<FaultControl> control);

}  // namespace kvtier::tiers::nvme
