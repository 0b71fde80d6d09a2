// SIGBUS guard: a thread-local jump buffer the handler returns to.
#include "kvtier/sigbus_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

namespace kvtier {
namespace {

thread_local sigjmp_buf* tls_guard = nullptr;

void SigbusHandler(int sig, siginfo_t*, void*) {
  if (sigjmp_buf* env = tls_guard) siglongjmp(*env, 1);
  // Not inside a guarded copy: a real bug. Die with the default action.
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = SigbusHandler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

bool GuardedRun(absl::FunctionRef<void()> fn) {
  sigjmp_buf env;
  // The signal mask is not saved (savemask 0): saving it is a
  // rt_sigprocmask call on every guarded copy, one per page and a tenth of
  // a one-page request's syscalls. Nothing needs restoring: the handler is
  // SA_NODEFER with an empty sa_mask, so it runs under the thread's own mask
  // and the jump back leaves that mask as it was.
  if (sigsetjmp(env, 0) != 0) {
    tls_guard = nullptr;
    return false;
  }
  tls_guard = &env;
  fn();
  tls_guard = nullptr;
  return true;
}

}  // namespace kvtier
