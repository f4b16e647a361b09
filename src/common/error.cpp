#include "cera/error.h"

namespace cera {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::Io: return "i/o error";
    case ErrorCode::BadFormat: return "bad format";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::OutOfRange: return "out of range";
    case ErrorCode::Cancelled: return "cancelled";
    case ErrorCode::Internal: return "internal error";
  }
  return "unknown error";
}

}  // namespace cera
