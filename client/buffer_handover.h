// Handing a buffer's file descriptor to kvtierd's buffer socket (SCM_RIGHTS;
// docs/PROTOCOL.md, "Buffers by file descriptor"). Private to client/.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier::client_internal {

// Sends `fd` to the daemon's buffer socket at `socket_path` and returns the
// 16-byte ticket it answers with, to be sent in REGISTER_BUFFER.
// Unavailable when the socket cannot be reached (none there, refused, or no
// answer within `timeout`); FailedPrecondition with the daemon's reason
// when it refuses the fd.
absl::StatusOr<std::string> HandOverFd(const std::string& socket_path, int fd,
                                       std::chrono::milliseconds timeout);

}  // namespace kvtier::client_internal
