// The daemon's heap policy (glibc malloc), set once at start.
//
// What an unauthenticated peer can make the daemon allocate is one
// handshake frame per connection, up to the frame cap (16 MiB by default;
// daemon/connection_guard.h), and that memory must go back to the system
// when the connection does. glibc's defaults do not promise that: its mmap
// threshold is dynamic, so once a 16 MiB frame was freed (munmap), the next
// frame of the same size comes from the arena of libzmq's I/O thread
// instead. Freed, it merges into that arena's top, which stays resident
// until 2× the threshold (32 MiB) is free there, and malloc_trim() trims
// the main arena's top only. One frame stayed resident after a flood,
// depending on the order the connections closed in (the
// PreAuthFloodHoldsNoMoreThanItsBound failures of clean-clone CI runs).
//
// Fixed thresholds instead: an allocation of kMmapThreshold or more is its
// own mapping, returned by free(); a free that leaves more than
// kTrimThreshold at the top of any arena shrinks it; free chunks inside a
// heap are returned by the guard's malloc_trim after unauthenticated
// connections close. The daemon's repeated large allocations stay below
// kMmapThreshold (a 4 MiB shared-cache publish batch, a page frame of an
// inline GET or PUT), so they keep reusing heap memory rather than paying a
// page fault per 4 KiB again each time.
#pragma once

#include <cstddef>

namespace kvtier::daemon {

inline constexpr size_t kMmapThreshold = size_t{8} << 20;
inline constexpr size_t kTrimThreshold = size_t{16} << 20;

// Sets both thresholds (which also turns glibc's dynamic adjustment off).
// Call from main() before any thread starts. False if glibc refused.
bool FixAllocatorThresholds();

}  // namespace kvtier::daemon
