// Who may talk to the daemon, decided before the first message: the ZeroMQ
// handshake authenticates every connection (ZAP, RFC 27) and the guard
// answers it. PLAIN: user name = tenant, password = its token. CURVE (when
// the operator gives the daemon a key pair): the client's public key names
// the tenant, and the connection is encrypted. libzmq attaches the tenant the
// guard answered with ("User-Id") to every message of the connection, so a
// session is bound to an authenticated identity, never to a routing id a
// client may choose, and a peer that has not authenticated can send no
// message at all (libzmq drops the connection after the handshake timeout).
//
// What an unauthenticated peer can still make the daemon hold is what
// libzmq buffers during the handshake: one frame of at most the socket's
// frame cap per connection, for at most the handshake timeout. The guard
// bounds how many such connections there are: per peer uid (ipc, from
// SO_PEERCRED) or peer address (tcp), and in total. A connection over the
// bound is shut down as soon as it is accepted. When unauthenticated
// connections go away it gives what the allocator kept back to the system
// (malloc_trim; with the heap thresholds of daemon/allocator.h, which
// kvtierd sets), so a flood leaves the daemon's RSS where it was.
//
// Everything runs on the guard's own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/tenants.h"
#include "zmq.hpp"

namespace kvtier::daemon {

struct ConnectionGuardConfig {
  // Connections accepted but not yet authenticated, per peer uid (ipc) or
  // address (tcp), and in all.
  int max_unauthenticated_per_peer = 3;
  int max_unauthenticated = 64;
  // CURVE: tenant name per client public key (Z85). Empty: PLAIN.
  absl::flat_hash_map<std::string, std::string> curve_tenant_by_key;
};


// The daemon's CURVE secret key from `path`: a regular file of mode 0600 (or
// stricter) holding the Z85 key (40 characters; surrounding space ignored).
// Errors name the file and what is wrong with it.
absl::StatusOr<std::string> LoadCurveSecretKey(const std::string& path);

// The ZAP domain the daemon's socket uses.
inline constexpr char kZapDomain[] = "kvtier";

class ConnectionGuard {
 public:
  // Binds the ZAP endpoint in `ctx` (before any socket of ctx accepts a
  // connection) and starts watching `router` (zmq_socket_monitor). Call on
  // the thread that owns `router`, before it binds. `tenants` must outlive
  // the guard.
  static absl::StatusOr<std::unique_ptr<ConnectionGuard>> Start(zmq::context_t& ctx,
                                                                zmq::socket_t& router,
                                                                const TenantRegistry* tenants,
                                                                ConnectionGuardConfig config);
  ~ConnectionGuard();  // stops the thread
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

 private:
  struct Impl;
  explicit ConnectionGuard(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::daemon
