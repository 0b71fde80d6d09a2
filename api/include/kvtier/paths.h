// Default locations shared by kvtierd, kvtierctl and the client library, so
// that with no flags at all they find each other.
#pragma once

#include <sys/socket.h>

#include <string>

#include "absl/status/status.h"

namespace kvtier {

// $XDG_RUNTIME_DIR/kvtier/kvtierd.sock, or /tmp/kvtier-$UID/kvtierd.sock.
std::string DefaultSocketPath();
// The system service's socket (packaging/systemd/kvtierd.service).
inline constexpr char kSystemSocketPath[] = "/run/kvtier/kvtierd.sock";
// "ipc://" + DefaultSocketPath(), or the system socket when no daemon
// answers on the per-user socket (no file, or a stale one that refuses
// connections) and the system one exists; $KVTIER_ENDPOINT overrides both.
std::string DefaultEndpoint();
// DefaultEndpoint's choice between a per-user and a system socket path
// (as "ipc://PATH"), for any two paths.
std::string ChooseEndpoint(const std::string& own_socket, const std::string& system_socket);

// What is at a Unix socket path, found with one plain connect(2) (instant
// on a Unix socket: a file nobody listens on refuses at once).
enum class SocketProbe {
  kAbsent,     // no file there
  kNotSocket,  // a file that is not a socket
  kRefused,    // a socket file nobody accepts on (left by a process that died)
  kAnswers,    // something accepts connections on it
  kUnknown,    // connect failed otherwise (permission, path too long, ...)
};
// `type` is the socket type the listener uses (SOCK_STREAM for ZeroMQ ipc,
// SOCK_SEQPACKET for the buffer socket): one of another type refuses.
SocketProbe ProbeUnixSocket(const std::string& path, int type = SOCK_STREAM);
// $XDG_STATE_HOME/kvtier, or ~/.local/state/kvtier.
std::string DefaultStateDir();

// Makes sure `dir` is a directory only this user can write to. Missing
// components are created with mode 0700. An existing directory is never
// chmodded (it may be shared, e.g. /tmp): one owned by another user (root
// aside) or writable by group or others is refused with FailedPrecondition
// naming it, because anyone who can write there can swap our socket or
// files. `what` names its role in errors ("state directory", ...).
// `created`, when given, tells whether the last component was made here.
absl::Status EnsurePrivateDir(const std::string& dir, const std::string& what,
                              bool* created = nullptr);

}  // namespace kvtier
