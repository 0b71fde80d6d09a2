// A std::mutex that clang's thread-safety analysis can see. libstdc++'s
// std::mutex carries no capability attributes, so `ABSL_GUARDED_BY(a
// std::mutex)` is never checked; this wrapper is. For code that must stay on
// std::mutex + std::condition_variable (ThreadSanitizer sees them even with
// the distro's uninstrumented Abseil); everywhere else, use absl::Mutex.
//
//   StdMutex mu_;
//   std::condition_variable cv_;
//   int n_ ABSL_GUARDED_BY(mu_) = 0;
//   ...
//   StdMutexLock lock(&mu_);
//   mu_.Await(cv_, [&] { mu_.AssertHeld(); return n_ > 0; });
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace kvtier {

class ABSL_LOCKABLE StdMutex {
 public:
  StdMutex() = default;
  StdMutex(const StdMutex&) = delete;
  StdMutex& operator=(const StdMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

  // Tells the analysis (only) that the caller holds this lock: the first line
  // of an Await predicate, which the analysis checks as a function of its own.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // Blocks on `cv` until `pred()` is true (std::condition_variable::wait).
  // The caller holds the lock; it is released while blocked and held again
  // on return and whenever `pred` runs.
  template <typename Pred>
  void Await(std::condition_variable& cv, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    cv.wait(lock, pred);
    lock.release();  // still held, by the caller
  }

 private:
  std::mutex mu_;
};

// Holds a StdMutex for its scope (absl::MutexLock's shape).
class ABSL_SCOPED_LOCKABLE StdMutexLock {
 public:
  explicit StdMutexLock(StdMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~StdMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  StdMutexLock(const StdMutexLock&) = delete;
  StdMutexLock& operator=(const StdMutexLock&) = delete;

 private:
  StdMutex* const mu_;
};

}  // namespace kvtier
