// I/O classes: who an NVMe I/O is for, so the device serves an engine's
// demand reads before prefetch reads before write-back (tiers/nvme's
// io_uring engine orders its queue by class and caps the lower classes'
// share of the queue depth). The class follows the thread that issues the
// I/O: the prefetcher's workers run as kPrefetch, the evictor as
// kWriteback, everything else (copy workers serving a GET or a PUT) is
// kDemand. A thread-local rather than a parameter because the I/O is issued
// several layers below the code that knows whom it serves (PromoteTo ->
// page move -> Tier::Read -> Device::ReadAsync), as RocksDB's
// Env::IOPriority is set per thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::tiers {

enum class IoClass : uint8_t {
  kDemand = 0,     // a request waits for it
  kPrefetch = 1,   // a promotion ahead of need
  kWriteback = 2,  // cleaning and demotion writes off the request path
};
inline constexpr size_t kIoClasses = 3;

inline const char* IoClassName(IoClass c) {
  switch (c) {
    case IoClass::kDemand: return "demand";
    case IoClass::kPrefetch: return "prefetch";
    case IoClass::kWriteback: return "writeback";
  }
  return "?";
}

namespace internal {
inline thread_local IoClass tls_io_class = IoClass::kDemand;
}  // namespace internal

// The class of I/O the calling thread issues now.
inline IoClass CurrentIoClass() { return internal::tls_io_class; }

// Sets the calling thread's I/O class for its lifetime, then restores the
// previous one. Not movable: it belongs to one thread's scope.
class IoClassScope {
 public:
  explicit IoClassScope(IoClass c) : previous_(internal::tls_io_class) {
    internal::tls_io_class = c;
  }
  ~IoClassScope() { internal::tls_io_class = previous_; }
  IoClassScope(const IoClassScope&) = delete;
  IoClassScope& operator=(const IoClassScope&) = delete;

 private:
  IoClass previous_;
};

}  // namespace kvtier::tiers
