// The liveness probe's wire format: ping and pong control messages exchanged per path (local
// domain d <-> the peer's domain d) as tagged messages, apart from the application's sends.
//
//   "FLPR" | u8 version (1) | u8 type (1 ping, 2 pong) | u16 domain | u64 seq |
//   u16 key length | key (the sender's domain-0 address) | u16 address length | address (the
//   sender's domain-d address, where the answer goes)
//
// It arrives from the network: decode() validates every field.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fabric_lib/status.h"

namespace fabric_lib::detail {

struct ProbeMessage {
  enum class Type : uint8_t { kPing = 1, kPong = 2 };
  Type type = Type::kPing;
  uint16_t domain = 0;
  uint64_t seq = 0;
  std::vector<uint8_t> key;
  std::vector<uint8_t> address;

  std::vector<uint8_t> encode() const;
  static Result<ProbeMessage> decode(std::span<const uint8_t> bytes);
};

// The largest encoded message (both addresses at the maximum length).
inline constexpr size_t kMaxProbeMessageBytes = 4 + 1 + 1 + 2 + 8 + 2 + 256 + 2 + 256;
// Tag of control messages (never used by application sends, which are untagged).
inline constexpr uint64_t kControlTag = 0xF1AB'C0DE'0000'0001ull;

}  // namespace fabric_lib::detail
