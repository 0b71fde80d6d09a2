// Validating a tcp endpoint before binding it. libzmq accepts much more than
// "tcp://HOST:PORT" — "source;address" (it binds the address), interface
// names, host names, "*" — so a prefix check on the text is not a check of
// where it binds. This parses the endpoint fully, resolves the host to
// numeric addresses, and returns the one numeric endpoint to bind, so what is
// bound is exactly what was validated.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kvtier::daemon {

struct TcpEndpoint {
  std::string bind;   // "tcp://127.0.0.1:7450" or "tcp://[::1]:7450"; port "*" = any
  bool ipv6 = false;  // the socket needs ZMQ_IPV6
  bool loopback = false;
};

// Parses "tcp://HOST:PORT" where HOST is an IPv4 literal, a bracketed IPv6
// literal, an interface name or a host name, and PORT a number or "*".
// Unless `allow_non_loopback`, every address HOST stands for must be a
// loopback address. Errors name the endpoint and what is wrong with it.
absl::StatusOr<TcpEndpoint> ResolveTcpEndpoint(const std::string& endpoint,
                                               bool allow_non_loopback);

}  // namespace kvtier::daemon
