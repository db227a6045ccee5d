// Error types shared by every lpemu layer. Errors carry a complete, human-readable message
// that names the file, field and value at fault and what was expected.
#pragma once

#include <stdexcept>
#include <string>

namespace lpemu {

/// Base of every error lpemu throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A malformed or inconsistent spec (format, block format, datapath, plan, experiment).
class SpecError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be read or written, or whose contents are corrupt.
class IoError : public Error {
 public:
  using Error::Error;
};

/// Tensor or span shapes that do not agree.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A name (format, datapath, plan, role) that is not known.
class UnknownNameError : public Error {
 public:
  using Error::Error;
};

}  // namespace lpemu
