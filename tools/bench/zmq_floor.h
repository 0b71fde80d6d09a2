// A bare ZeroMQ request/reply baseline for the `lookup` section: what one
// round trip costs on this machine before the daemon does any work.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"
#include "zmq.hpp"

namespace kvtier::bench {

// Echo server body of the hidden `zmq-echo ENDPOINT` section; never returns
// unless its parent is gone.
int RunZmqEcho(const std::string& endpoint);

// A child echo server on a private ipc socket and one DEALER connected to it,
// for measurements interleaved with the daemon's (same noise for both).
// Stops the child and removes the socket on destruction.
class ZmqEcho {
 public:
  static absl::StatusOr<std::unique_ptr<ZmqEcho>> Start();
  ~ZmqEcho();
  const std::string& endpoint() const { return endpoint_; }
  // One LOOKUP-sized request/reply exchange, as Client::Impl::Call does it.
  bool RoundTrip();

 private:
  ZmqEcho() = default;
  std::string dir_, endpoint_;
  int pid_ = 0;
  std::unique_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> socket_;
};
// Latency over `calls` round trips and the multi-client rate, against a
// child echo server started here and stopped before returning.
absl::StatusOr<nlohmann::json> RunZmqFloor(const BenchOptions& o, int calls);

}  // namespace kvtier::bench
