// Surviving SIGBUS from memory another process controls: a client may shrink
// a shared-memory object the daemon has mapped (its buffer, or the emulated
// device's memory), and a copy touching the lost pages then raises SIGBUS.
// Copies over such mappings run inside GuardedRun, which turns the fault into
// a false return instead of killing the daemon.
#pragma once

#include "absl/functional/function_ref.h"

namespace kvtier {

// Installs the process-wide SIGBUS handler GuardedRun needs (idempotent,
// thread-safe). A SIGBUS outside GuardedRun still kills the process.
void InstallSigbusGuard();
// Runs fn; returns false if it touched a mapping that raised SIGBUS. fn must
// not hold locks or own heap state that would leak if cut short.
bool GuardedRun(absl::FunctionRef<void()> fn);

}  // namespace kvtier
