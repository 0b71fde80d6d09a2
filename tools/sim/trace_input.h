// From a parsed trace (tools/trace) to the sim's requests: the page ids
// kvtier-stress looks up and PUTs for each request under a page mapping.
#pragma once

#include <vector>

#include "tools/sim/sim.h"
#include "tools/trace/trace.h"

namespace kvtier::sim {

std::vector<SimRequest> FromTrace(const trace::Trace& t, const trace::PageMapping& mapping);

}  // namespace kvtier::sim
