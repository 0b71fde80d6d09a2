// A process that reaches kill point "probe.x" and then says it survived. Built
// twice (tests/hooks/CMakeLists.txt): with KVTIER_TEST_HOOKS, where
// KVTIER_KILL_POINT=probe.x in the environment must SIGKILL it, and without,
// as a release kvtierd is built, where the same environment must change nothing.
#include <cstdio>
#include <cstdlib>

#include "kvtier/test_hooks.h"

#ifdef KVTIER_PROBE_EXPECT_HOOKS
static_assert(kvtier::test_hooks::kEnabled, "the 'on' probe must be built with KVTIER_TEST_HOOKS");
#else
static_assert(!kvtier::test_hooks::kEnabled,
              "the 'off' probe must be built without KVTIER_TEST_HOOKS (-UKVTIER_TEST_HOOKS)");
#endif

int main() {
  const char* spec = std::getenv("KVTIER_KILL_POINT");
  if (spec == nullptr) {
    std::fprintf(stderr, "kill_point_probe: set KVTIER_KILL_POINT (e.g. probe.x)\n");
    return 2;
  }
  KVTIER_KILL_POINT("probe.x");
#ifndef KVTIER_PROBE_EXPECT_HOOKS
  // Even a direct call into a hooks-off build of api/test_hooks.cc (as an
  // object built with hooks would make) must not read the environment.
  kvtier::test_hooks::internal::KillPointSlow("probe.x");
#endif
  std::printf("kill_point_probe: survived KVTIER_KILL_POINT=%s\n", spec);
  return 0;
}
