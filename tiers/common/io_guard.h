// Threads that must never cause disk I/O (kvtierd's frontend) say so with a
// NoDiskIoScope. The store then queues the record deletions such a thread
// would cause for its evictor thread, and persistent tiers count any device
// or index I/O done on it anyway (IoCounters::forbidden_io: a bug, which
// tests assert never happens).
#pragma once

namespace kvtier::tiers {

class NoDiskIoScope {
 public:
  NoDiskIoScope();
  ~NoDiskIoScope();
  NoDiskIoScope(const NoDiskIoScope&) = delete;
  NoDiskIoScope& operator=(const NoDiskIoScope&) = delete;

 private:
  bool prev_;
};

// True on a thread inside a NoDiskIoScope.
bool DiskIoForbiddenHere();

}  // namespace kvtier::tiers
