// Errors as values: every fallible call of fabric-lib returns a Status or a Result<T>.
// Nothing in the public API throws or aborts on bad input from a caller or from the network.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace fabric_lib {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // a caller's argument is wrong (size, index, flag, range)
  kNotFound,            // unknown or already unregistered handle, unknown imm, unknown peer
  kOutOfRange,          // a byte range falls outside a local or remote memory region
  kAlreadyExists,       // e.g. a second expectation for the same imm value
  kResourceExhausted,   // a bounded table or pool is full
  kMalformed,           // bytes that came from outside (descriptor, address) do not decode
  kUnsupported,         // the provider or build lacks a needed capability
  kStopped,             // the engine was stopped (submit after stop)
  kCancelled,           // an accepted operation ended because of stop() or release()
  kDeadlineExceeded,    // an accepted operation passed its deadline
  kPeerUnreachable,     // the remote peer failed or cannot be reached through any domain
  kDomainDown,          // the domain (NIC path) carrying part of the operation failed; others work
  kProviderError,       // the transport (libfabric provider) reported an error
  kFailedPrecondition,  // the call is not allowed in the current state (e.g. stop() from a callback)
  kInternal,            // a bug in fabric-lib; please report it
};

// Stable, lower-case name of an error code ("invalid_argument", ...).
std::string_view error_code_name(ErrorCode code);

// A success or an error code with a human-readable message. One pointer wide (null = Ok, as
// LevelDB's Status): passing and copying an Ok status costs nothing, and events and results that
// carry one stay small; an error holds its code and message on the heap.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) {
    if (code != ErrorCode::kOk) rep_ = std::make_unique<Rep>(Rep{code, std::move(message)});
  }
  Status(const Status& other) : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok_status() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  ErrorCode code() const { return rep_ ? rep_->code : ErrorCode::kOk; }
  // The message ("" when ok).
  const std::string& message() const;
  // "ok" or "<code name>: <message>".
  std::string to_string() const;

  friend bool operator==(const Status& a, const Status& b) { return a.code() == b.code(); }

 private:
  struct Rep {
    ErrorCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status ok_status() { return Status(); }

// Shorthands used throughout the library and its tests.
inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status malformed(std::string m) { return {ErrorCode::kMalformed, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status cancelled(std::string m) { return {ErrorCode::kCancelled, std::move(m)}; }
inline Status stopped(std::string m) { return {ErrorCode::kStopped, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// A value of type T or an error Status (never an ok Status).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::kInternal, "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; ok_status() when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // Accessing the value of an error Result is a programming error (checked in debug builds).
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fabric_lib

// Propagate an error Status from an expression returning Status.
#define FABRIC_LIB_RETURN_IF_ERROR(expr)          \
  do {                                            \
    ::fabric_lib::Status _fl_status = (expr);     \
    if (!_fl_status.ok()) return _fl_status;      \
  } while (0)
