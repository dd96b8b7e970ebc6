#include "fabric_lib/domain_address.h"

#include <string_view>

namespace fabric_lib {
namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Result<std::vector<uint8_t>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return malformed("hex string of odd length " + std::to_string(hex.size()));
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(hex[2 * i]);
    int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return malformed("non-hex character at offset " + std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

Result<DomainAddress> DomainAddress::from_bytes(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return malformed("empty domain address");
  if (bytes.size() > kMaxDomainAddressBytes) {
    return malformed("domain address of " + std::to_string(bytes.size()) + " bytes (max " +
                     std::to_string(kMaxDomainAddressBytes) + ")");
  }
  DomainAddress a;
  a.bytes_.assign(bytes.begin(), bytes.end());
  return a;
}

Result<DomainAddress> DomainAddress::from_hex(std::string_view hex) {
  Result<std::vector<uint8_t>> bytes = fabric_lib::from_hex(hex);
  if (!bytes.ok()) return bytes.status();
  return from_bytes(*bytes);
}

std::string DomainAddress::to_hex() const { return fabric_lib::to_hex(bytes_); }

}  // namespace fabric_lib

size_t std::hash<fabric_lib::DomainAddress>::operator()(const fabric_lib::DomainAddress& a) const noexcept {
  // FNV-1a over the bytes.
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : a.bytes()) h = (h ^ b) * 1099511628211ull;
  return static_cast<size_t>(h);
}
