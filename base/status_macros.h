// Status plumbing shared by every module: early-return helpers for absl::Status
// and absl::StatusOr, so fallible code reads top to bottom.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MPC_CONCAT_INNER(a, b) a##b
#define MPC_CONCAT(a, b) MPC_CONCAT_INNER(a, b)

#define MPC_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status _mpc_status = (expr);       \
    if (!_mpc_status.ok()) return _mpc_status; \
  } while (0)

#define MPC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define MPC_ASSIGN_OR_RETURN(lhs, expr) MPC_ASSIGN_OR_RETURN_IMPL(MPC_CONCAT(_mpc_statusor_, __LINE__), lhs, expr)
