// Status propagation helpers shared by every torch-rbln library.
#ifndef RBLN_CORE_STATUS_MACROS_H_
#define RBLN_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RBLN_STATUS_CONCAT_INNER_(a, b) a##b
#define RBLN_STATUS_CONCAT_(a, b) RBLN_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define RBLN_RETURN_IF_ERROR(expr)                    \
  do {                                                \
    ::absl::Status rbln_status_ = (expr);             \
    if (!rbln_status_.ok()) return rbln_status_;      \
  } while (false)

// `RBLN_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its
// error.
#define RBLN_ASSIGN_OR_RETURN(lhs, expr) \
  RBLN_ASSIGN_OR_RETURN_IMPL_(RBLN_STATUS_CONCAT_(rbln_statusor_, __LINE__), lhs, expr)

#define RBLN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // RBLN_CORE_STATUS_MACROS_H_
