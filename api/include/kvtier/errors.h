// Error codes shared by the daemon and clients. On the wire a reply carries a
// Code and a message; both ends convert to and from absl::Status here so the
// client sees the daemon's own words.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace kvtier {

// Mirrors kvtier.wire.Code (api/proto/kvtier.proto); values must match.
enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kPermissionDenied = 3,
  kUnauthenticated = 4,
  kResourceExhausted = 5,
  kFailedPrecondition = 6,
  kOutOfRange = 7,
  kUnimplemented = 8,
  kInternal = 9,
  kUnavailable = 10,
  kDataLoss = 11,
  kDeadlineExceeded = 12,
};

ErrorCode ToErrorCode(absl::StatusCode code);
absl::StatusCode ToStatusCode(ErrorCode code);
absl::Status MakeStatus(ErrorCode code, absl::string_view message);

// A start refused for a reason only the operator can settle (an NVMe
// geometry change that would lose the cached pages, a socket another daemon
// answers on): starting again the same way fails the same way. kvtierd exits
// 2 on such an error, so systemd (RestartPreventExitStatus=2) stops
// restarting it. MarkNeedsOperator tags a non-OK status; NeedsOperator
// tells whether one is tagged.
absl::Status MarkNeedsOperator(absl::Status status);
bool NeedsOperator(const absl::Status& status);

}  // namespace kvtier
