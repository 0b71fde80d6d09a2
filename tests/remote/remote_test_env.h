// One loopback cluster shared by every test of a binary that links this:
// started before the first test (when redis is installed), stopped after
// the last.
#pragma once

#include "tests/remote/cluster_fixture.h"

namespace kvtier::tiers::remote::testing {

// The binary's cluster; nullptr when redis is not installed.
LoopbackCluster* SharedCluster();

}  // namespace kvtier::tiers::remote::testing
