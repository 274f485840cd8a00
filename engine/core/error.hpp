#pragma once
// The engine's exception family. Every message names what a user needs to act:
// the op and module path, shapes, dtype and device; the file, key or tensor;
// the OpenCL status and call. No exit/abort anywhere in the engine.

#include <stdexcept>
#include <string>

namespace nanscope {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A problem with the inputs of an op: shapes, dtypes, tensors from another device.
class OpError : public Error {
 public:
  using Error::Error;
};

// A device could not be found, created or used (also a pinned device that is missing).
class DeviceError : public Error {
 public:
  using Error::Error;
};

// An OpenCL call failed. `status` is the CL error code.
class ClError : public DeviceError {
 public:
  ClError(const std::string& what, int status) : DeviceError(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// A file could not be read, or its content is not what was expected.
class FileError : public Error {
 public:
  using Error::Error;
};

// A configuration value (preset key, --set value, CLI option) is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The user cancelled the run; thrown between ops (OpContext::cancel) and
// caught by the pipeline, which reports the run as cancelled. Not a failure.
class Cancelled : public Error {
 public:
  using Error::Error;
};

}  // namespace nanscope
