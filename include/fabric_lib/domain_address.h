// DomainAddress: the network address of one domain (one NIC) of an engine, as opaque bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fabric_lib/status.h"

namespace fabric_lib {

// The longest address any supported transport produces (libfabric's are 16-64 bytes).
inline constexpr size_t kMaxDomainAddressBytes = 256;

// Opaque, provider-specific address bytes. Obtain one from TransferEngine::main_address() or from a
// MrDesc, ship it to peers as bytes or hex, and decode it with from_bytes/from_hex (which validate
// the length only: the content is checked by the provider when the address is first used).
class DomainAddress {
 public:
  DomainAddress() = default;  // empty; not a usable address

  static Result<DomainAddress> from_bytes(std::span<const uint8_t> bytes);
  static Result<DomainAddress> from_hex(std::string_view hex);

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> to_bytes() const { return bytes_; }
  std::string to_hex() const;
  bool empty() const { return bytes_.empty(); }

  friend bool operator==(const DomainAddress& a, const DomainAddress& b) { return a.bytes_ == b.bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Lower-case hex of bytes, and its inverse (rejects odd lengths and non-hex characters).
std::string to_hex(std::span<const uint8_t> bytes);
Result<std::vector<uint8_t>> from_hex(std::string_view hex);

}  // namespace fabric_lib

template <>
struct std::hash<fabric_lib::DomainAddress> {
  size_t operator()(const fabric_lib::DomainAddress& a) const noexcept;
};
