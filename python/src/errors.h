// fabric_lib::Status as Python exceptions: FabricError and one subclass per error code.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>

#include "fabric_lib/status.h"

namespace fabric_lib::python {

namespace py = pybind11;

// Thrown by binding code for an error Status; translated to the matching FabricError subclass.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Throws StatusError when `status` is an error.
inline void check(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}
// Returns the value of `result`, or throws StatusError.
template <typename T>
T take(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Creates FabricError and its subclasses in `m` and registers the StatusError translator.
void bind_errors(py::module_& m);

// With the GIL held: the exception object for an error Status (an instance of the matching
// FabricError subclass with .code and .message set), e.g. for on_error callbacks.
py::object error_object(const Status& status);

}  // namespace fabric_lib::python
