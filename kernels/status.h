// Status codes returned by compute kernels (CPU and CUDA). Kernels are leaves:
// they never throw and never log bad arguments; they report one of these
// codes and leave their outputs untouched when the arguments are rejected.
// The caller (a Backend) turns a non-kOk status into an Error with context.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata {

enum class Status : uint8_t {
  kOk,
  kInvalidArgument,  // a size, stride, index or pointer the op cannot accept
  kUnsupported,      // valid request this build or this op does not implement
  kOutOfMemory,      // a workspace could not be grown
  kBackendError,     // a library the kernel uses (oneDNN, cuBLAS) failed
};

inline std::string_view status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kOutOfMemory:
      return "out of memory";
    case Status::kBackendError:
      return "backend error";
  }
  return "unknown status";
}

}  // namespace strata
