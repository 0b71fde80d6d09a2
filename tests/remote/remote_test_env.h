// One loopback cluster shared by every test of a binary that links this:
// started before the first test (when redis is installed), stopped after
// the last.
#pragma once

#include <cstdint>

#include "kvtier/page_key.h"
#include "tests/remote/cluster_fixture.h"

namespace kvtier::tiers::remote::testing {

// The binary's cluster; nullptr when redis is not installed.
LoopbackCluster* SharedCluster();

// Page key i of a test file; `tag` keeps two files' keys apart on the
// shared cluster.
inline PageKey TestKey(uint64_t i, uint8_t tag) {
  PageKey k;
  for (int b = 0; b < 8; ++b) k.bytes[b] = static_cast<uint8_t>(i >> (8 * b));
  k.bytes[15] = tag;
  return k;
}

}  // namespace kvtier::tiers::remote::testing
