// A bare ZeroMQ request/reply baseline for the `lookup` section: what one
// round trip costs on this machine before the daemon does any work.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"

namespace kvtier::bench {

// Echo server body of the hidden `zmq-echo ENDPOINT` section; never returns
// unless its parent is gone.
int RunZmqEcho(const std::string& endpoint);
// Latency over `calls` round trips and the multi-client rate, against a
// child echo server started here and stopped before returning.
absl::StatusOr<nlohmann::json> RunZmqFloor(const BenchOptions& o, int calls);

}  // namespace kvtier::bench
