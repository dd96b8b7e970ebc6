#include "core/probe_message.h"

#include <cstring>

#include "fabric_lib/byte_codec.h"
#include "fabric_lib/domain_address.h"

namespace fabric_lib::detail {
namespace {
constexpr uint8_t kMagic[4] = {'F', 'L', 'P', 'R'};
constexpr uint8_t kVersion = 1;
}  // namespace

std::vector<uint8_t> ProbeMessage::encode() const {
  codec::ByteWriter w;
  w.bytes(kMagic);
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(type));
  w.u16(domain);
  w.u64(seq);
  w.u16(static_cast<uint16_t>(key.size()));
  w.bytes(key);
  w.u16(static_cast<uint16_t>(address.size()));
  w.bytes(address);
  return w.take();
}

Result<ProbeMessage> ProbeMessage::decode(std::span<const uint8_t> bytes) {
  codec::ByteReader r(bytes);
  std::vector<uint8_t> magic;
  if (!r.bytes(4, magic) || std::memcmp(magic.data(), kMagic, 4) != 0) return malformed("not a probe message");
  uint8_t version = 0, type = 0;
  ProbeMessage m;
  uint16_t key_len = 0, addr_len = 0;
  if (!r.u8(version) || !r.u8(type) || !r.u16(m.domain) || !r.u64(m.seq)) return malformed("probe message truncated");
  if (version != kVersion) return malformed("probe message version " + std::to_string(version));
  if (type != static_cast<uint8_t>(Type::kPing) && type != static_cast<uint8_t>(Type::kPong)) {
    return malformed("probe message type " + std::to_string(type));
  }
  m.type = static_cast<Type>(type);
  if (!r.u16(key_len) || key_len == 0 || key_len > kMaxDomainAddressBytes || !r.bytes(key_len, m.key)) {
    return malformed("probe message key");
  }
  if (!r.u16(addr_len) || addr_len == 0 || addr_len > kMaxDomainAddressBytes || !r.bytes(addr_len, m.address)) {
    return malformed("probe message address");
  }
  if (!r.at_end()) return malformed("probe message followed by extra bytes");
  return m;
}

}  // namespace fabric_lib::detail
