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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

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

// A waiter's claim on I/O issued at a lower class. A promotion issued as
// prefetch may be joined later by a GET that needs the same page; from that
// moment the GET waits on it, so it must not stay capped at prefetch's share
// of the queue behind other demand reads. The prefetcher hands each
// promotion a token and sets it when a GET joins; the device queue serves a
// queued request whose token is set as demand I/O (tiers/nvme's io_uring
// engine checks each time it takes new requests). Like the class, the token
// follows the issuing thread's scope (IoUrgencyScope), because the I/O is
// issued layers below the code that knows whom it serves.
using IoUrgency = std::shared_ptr<const std::atomic<bool>>;

namespace internal {
inline thread_local const IoUrgency* tls_io_urgency = nullptr;
}  // namespace internal

// The token of the I/O the calling thread issues now (null: none).
inline IoUrgency CurrentIoUrgency() {
  return internal::tls_io_urgency == nullptr ? nullptr : *internal::tls_io_urgency;
}
inline bool Urgent(const IoUrgency& u) {
  return u != nullptr && u->load(std::memory_order_acquire);
}

// Sets the calling thread's urgency token for its lifetime (null: none),
// then restores the previous one.
class IoUrgencyScope {
 public:
  explicit IoUrgencyScope(IoUrgency u)
      : urgency_(std::move(u)), previous_(internal::tls_io_urgency) {
    internal::tls_io_urgency = &urgency_;
  }
  ~IoUrgencyScope() { internal::tls_io_urgency = previous_; }
  IoUrgencyScope(const IoUrgencyScope&) = delete;
  IoUrgencyScope& operator=(const IoUrgencyScope&) = delete;

 private:
  const IoUrgency urgency_;
  const IoUrgency* previous_;
};

}  // namespace kvtier::tiers
