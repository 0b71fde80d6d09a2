// Default locations shared by kvtierd, kvtierctl and the client library, so
// that with no flags at all they find each other.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kvtier {

// $XDG_RUNTIME_DIR/kvtier/kvtierd.sock, or /tmp/kvtier-$UID/kvtierd.sock.
std::string DefaultSocketPath();
// The system service's socket (packaging/systemd/kvtierd.service).
inline constexpr char kSystemSocketPath[] = "/run/kvtier/kvtierd.sock";
// "ipc://" + DefaultSocketPath(), or the system socket when there is no
// per-user socket and the system one exists; $KVTIER_ENDPOINT overrides both.
std::string DefaultEndpoint();
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
