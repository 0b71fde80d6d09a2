// Default locations shared by kvtierd, kvtierctl and the client library, so
// that with no flags at all they find each other.
#pragma once

#include <string>

namespace kvtier {

// $XDG_RUNTIME_DIR/kvtier/kvtierd.sock, or /tmp/kvtier-$UID/kvtierd.sock.
std::string DefaultSocketPath();
// "ipc://" + DefaultSocketPath(); $KVTIER_ENDPOINT overrides it when set.
std::string DefaultEndpoint();
// $XDG_STATE_HOME/kvtier, or ~/.local/state/kvtier.
std::string DefaultStateDir();

}  // namespace kvtier
