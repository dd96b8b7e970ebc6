#include "transport/ipc/ipc_address.h"

#include <cstring>

#include "fabric_lib/byte_codec.h"

namespace fabric_lib::transport::ipc {
namespace {
constexpr uint8_t kMagic[4] = {'F', 'L', 'N', 'V'};
}  // namespace

bool valid_segment_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxSegmentNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

std::vector<uint8_t> IpcAddress::encode() const {
  codec::ByteWriter w;
  w.bytes(kMagic);
  w.u8(kAddressVersion);
  w.u8(0);
  w.u16(static_cast<uint16_t>(segment_name.size()));
  w.bytes(owner.boot_id);
  w.u64(owner.pid_namespace);
  w.u32(owner.pid);
  w.u32(0);
  w.u64(owner.start_time);
  w.u64(nonce);
  w.bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(segment_name.data()), segment_name.size()));
  return w.take();
}

Result<IpcAddress> IpcAddress::decode(std::span<const uint8_t> bytes) {
  codec::ByteReader r(bytes);
  std::vector<uint8_t> magic;
  if (!r.bytes(4, magic) || std::memcmp(magic.data(), kMagic, 4) != 0) {
    return malformed("not an ipc domain address (" + std::to_string(bytes.size()) +
                     " bytes without the FLNV magic): the peer uses another transport");
  }
  uint8_t version = 0, reserved8 = 0;
  uint16_t name_length = 0;
  if (!r.u8(version) || !r.u8(reserved8) || !r.u16(name_length)) return malformed("truncated ipc address");
  if (version != kAddressVersion) {
    return malformed("ipc address version " + std::to_string(version) + " (this build speaks version " +
                     std::to_string(kAddressVersion) + ")");
  }
  if (reserved8 != 0) return malformed("ipc address: reserved byte is not zero");
  if (name_length == 0 || name_length > kMaxSegmentNameBytes) {
    return malformed("ipc address: segment name of " + std::to_string(name_length) + " bytes");
  }
  IpcAddress a;
  std::vector<uint8_t> boot;
  uint32_t reserved32 = 0;
  std::vector<uint8_t> name;
  if (!r.bytes(a.owner.boot_id.size(), boot) || !r.u64(a.owner.pid_namespace) || !r.u32(a.owner.pid) ||
      !r.u32(reserved32) || !r.u64(a.owner.start_time) || !r.u64(a.nonce) || !r.bytes(name_length, name)) {
    return malformed("truncated ipc address");
  }
  if (!r.at_end()) return malformed("ipc address has " + std::to_string(r.remaining()) + " trailing bytes");
  if (reserved32 != 0) return malformed("ipc address: reserved word is not zero");
  if (a.owner.pid == 0) return malformed("ipc address: owner pid 0");
  std::memcpy(a.owner.boot_id.data(), boot.data(), boot.size());
  a.segment_name.assign(name.begin(), name.end());
  if (!valid_segment_name(a.segment_name)) return malformed("ipc address: bad segment name");
  return a;
}

Status check_reachable(const IpcAddress& peer, const ProcessIdentity& self) {
  if (peer.owner.boot_id != self.boot_id) {
    return Status(ErrorCode::kPeerUnreachable,
                  "the peer's ipc domain is on another host (boot id " + boot_id_text(peer.owner.boot_id) +
                      ", this host's is " + boot_id_text(self.boot_id) +
                      "): ipc connects processes of one host only; use a network provider (efa, verbs, tcp) "
                      "between hosts");
  }
  if (peer.owner.pid_namespace != self.pid_namespace) {
    return Status(ErrorCode::kPeerUnreachable,
                  "the peer's ipc domain is in another PID namespace (a different container?): ipc needs "
                  "both processes in one PID namespace and one /dev/shm");
  }
  return ok_status();
}

}  // namespace fabric_lib::transport::ipc
