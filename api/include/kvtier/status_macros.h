// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Abseil 20220623
// does not ship. Every module boundary in kvtier speaks absl::Status.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status kvtier_status_ = (expr);            \
    if (!kvtier_status_.ok()) return kvtier_status_;   \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr<T>; returns its status on
// error, otherwise moves the value into `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_statusor_, __LINE__), lhs, expr)

#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()
