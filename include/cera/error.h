// cera::Error — the one exception type the library throws. Every failure a user can cause (a bad
// file, a bad flag, a prompt too long) surfaces as an Error with a code and a message that names
// the offending thing (file, key, tensor) and, where possible, what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace cera {

enum class ErrorCode {
  InvalidArgument,  // a caller passed something unusable (bad flag value, bad token id)
  Io,               // the OS refused (open, mmap, read, write)
  BadFormat,        // a file is malformed: truncated, bad magic, out-of-bounds offsets, ...
  Unsupported,      // well-formed but not something cera runs (unknown arch, tensor type, version)
  NotFound,         // a required key / tensor / file is missing
  OutOfRange,       // a value is outside what is allowed (context overflow, index past end)
  Cancelled,        // the caller asked to stop
  Internal,         // a bug in cera: please report it
};

const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace cera
