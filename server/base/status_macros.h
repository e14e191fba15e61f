// Early-return helpers for absl::Status and absl::StatusOr.
//
// Abseil 20220623 (Debian 12) ships neither RETURN_IF_ERROR nor ASSIGN_OR_RETURN, so ktune
// carries these two. Stateless macros; safe anywhere.
#ifndef KTUNE_SERVER_BASE_STATUS_MACROS_H_
#define KTUNE_SERVER_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function with the status of `expr` unless it is OK.
#define KTUNE_RETURN_IF_ERROR(expr)                    \
  do {                                                 \
    ::absl::Status ktune_status_ = (expr);             \
    if (!ktune_status_.ok()) return ktune_status_;     \
  } while (false)

#define KTUNE_STATUS_CONCAT_INNER_(a, b) a##b
#define KTUNE_STATUS_CONCAT_(a, b) KTUNE_STATUS_CONCAT_INNER_(a, b)

// `KTUNE_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns `x` from an OK StatusOr, and
// otherwise returns its status from the enclosing function.
#define KTUNE_ASSIGN_OR_RETURN(lhs, expr) \
  KTUNE_ASSIGN_OR_RETURN_IMPL_(KTUNE_STATUS_CONCAT_(ktune_statusor_, __LINE__), lhs, expr)

#define KTUNE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // KTUNE_SERVER_BASE_STATUS_MACROS_H_
