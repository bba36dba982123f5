// Errors raised by tilus. Every error that a user's mistake can cause carries the
// source location of the instruction that caused it.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace tilus {

// A position in a user's source file (C++ or Python).
struct SourceLoc {
  std::string file;
  int line = 0;
  int column = 0;
  std::string function;

  bool valid() const { return !file.empty(); }
  // "file:line" (or "<unknown>").
  std::string str() const;
  static SourceLoc from(const std::source_location& loc);
};

// Base of every exception tilus throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, SourceLoc loc = {});
  const SourceLoc& loc() const { return loc_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }

 private:
  SourceLoc loc_;
  std::string message_;
};

// A mistake in a user's Script: bad shapes, dtypes, options, or IR that fails verification.
class CompileError : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside tilus itself: a bug, never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace tilus
