// A minimal HTTP/1.1 server for Prometheus scrapes: one thread, plain sockets
// and poll(2), bound to one address (127.0.0.1 unless the operator names
// another: --metrics_address). It answers GET/HEAD /metrics with the
// text from a render callback and everything else with 4xx; requests are
// bounded in size and time, every connection is closed after one response,
// and nothing a client sends can crash or stall the daemon.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvtier::daemon {

struct MetricsHttpOptions {
  // An IPv4 or IPv6 literal (no host names: what a name resolves to can
  // change under a running daemon, and the exposure must be what was asked).
  std::string address = "127.0.0.1";
  int port = 0;                     // 0: an ephemeral port (see port())
  size_t max_request_bytes = 8192;  // request line + headers; more gets 431
  int max_connections = 32;         // further clients wait in the backlog
  absl::Duration io_timeout = absl::Seconds(5);  // per connection, accept to close
};

// What to answer to one request head (the bytes before the blank line).
struct HttpVerdict {
  int status = 400;
  std::string reason;   // "OK", "Not Found", ...
  std::string problem;  // for 4xx: names what was wrong, sent as the body
  bool head_only = false;
};
HttpVerdict ClassifyRequest(absl::string_view head);

// Whether `address` (an IPv4 or IPv6 literal) is a loopback address:
// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. InvalidArgument when it is no literal.
absl::StatusOr<bool> IsLoopbackAddress(absl::string_view address);

// "host:port" as a URL writes it: IPv6 literals in brackets.
std::string HostPort(absl::string_view address, int port);

// A complete HTTP/1.1 response with Content-Length and Connection: close.
std::string HttpResponse(const HttpVerdict& v, absl::string_view body, absl::string_view type);

class MetricsHttpServer {
 public:
  // Called on the server thread for each GET /metrics; must be thread-safe
  // with respect to the rest of the daemon.
  using Render = std::function<std::string()>;

  // Binds address:port and starts the thread. InvalidArgument when the
  // address is no IP literal; FailedPrecondition naming the address, the port
  // and the errno text when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpOptions& options,
                                                                  Render render);
  ~MetricsHttpServer();  // stops the thread and closes every socket

  int port() const { return port_; }
  uint64_t responses() const { return responses_.load(std::memory_order_relaxed); }

 private:
  struct Conn;
  MetricsHttpServer(MetricsHttpOptions options, Render render)
      : options_(options), render_(std::move(render)) {}
  void Loop();
  void AcceptAll(std::vector<Conn>& conns);
  // Reads what is there; once the head is complete (or too long), queues the
  // response. Returns false when the connection should be closed now.
  bool OnReadable(Conn& c);
  bool OnWritable(Conn& c);

  const MetricsHttpOptions options_;
  const Render render_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: the destructor's stop signal
  int port_ = 0;
  std::atomic<uint64_t> responses_{0};
  std::thread thread_;
};

}  // namespace kvtier::daemon
