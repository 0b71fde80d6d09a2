// Mapping between wire error codes and absl::Status.
#include "kvtier/errors.h"

#include "absl/strings/cord.h"

#include <string>

namespace kvtier {

ErrorCode ToErrorCode(absl::StatusCode code) {
  using C = absl::StatusCode;
  switch (code) {
    case C::kOk: return ErrorCode::kOk;
    case C::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case C::kNotFound: return ErrorCode::kNotFound;
    case C::kPermissionDenied: return ErrorCode::kPermissionDenied;
    case C::kUnauthenticated: return ErrorCode::kUnauthenticated;
    case C::kResourceExhausted: return ErrorCode::kResourceExhausted;
    case C::kFailedPrecondition: return ErrorCode::kFailedPrecondition;
    case C::kOutOfRange: return ErrorCode::kOutOfRange;
    case C::kUnimplemented: return ErrorCode::kUnimplemented;
    case C::kUnavailable: return ErrorCode::kUnavailable;
    case C::kDataLoss: return ErrorCode::kDataLoss;
    case C::kDeadlineExceeded: return ErrorCode::kDeadlineExceeded;
    default: return ErrorCode::kInternal;
  }
}

absl::StatusCode ToStatusCode(ErrorCode code) {
  using C = absl::StatusCode;
  switch (code) {
    case ErrorCode::kOk: return C::kOk;
    case ErrorCode::kInvalidArgument: return C::kInvalidArgument;
    case ErrorCode::kNotFound: return C::kNotFound;
    case ErrorCode::kPermissionDenied: return C::kPermissionDenied;
    case ErrorCode::kUnauthenticated: return C::kUnauthenticated;
    case ErrorCode::kResourceExhausted: return C::kResourceExhausted;
    case ErrorCode::kFailedPrecondition: return C::kFailedPrecondition;
    case ErrorCode::kOutOfRange: return C::kOutOfRange;
    case ErrorCode::kUnimplemented: return C::kUnimplemented;
    case ErrorCode::kInternal: return C::kInternal;
    case ErrorCode::kUnavailable: return C::kUnavailable;
    case ErrorCode::kDataLoss: return C::kDataLoss;
    case ErrorCode::kDeadlineExceeded: return C::kDeadlineExceeded;
  }
  return C::kUnknown;
}

absl::Status MakeStatus(ErrorCode code, absl::string_view message) {
  if (code == ErrorCode::kOk) return absl::OkStatus();
  return absl::Status(ToStatusCode(code), std::string(message));
}

namespace {
// The payload that marks a status NeedsOperator; its value is unused.
constexpr absl::string_view kNeedsOperatorUrl = "kvtier/needs-operator";
}  // namespace

absl::Status MarkNeedsOperator(absl::Status status) {
  if (!status.ok()) status.SetPayload(kNeedsOperatorUrl, absl::Cord("1"));
  return status;
}

bool NeedsOperator(const absl::Status& status) {
  return status.GetPayload(kNeedsOperatorUrl).has_value();
}

}  // namespace kvtier
