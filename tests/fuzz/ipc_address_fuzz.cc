// libFuzzer target: the IPC backend's domain address (transport/ipc/ipc_address.h), which a peer
// process hands over at add_peer. Either rejected with kMalformed, or decoded into a valid segment
// name and re-encoded to exactly the same bytes; check_reachable() then answers Ok or
// PeerUnreachable against any identity.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "transport/ipc/ipc_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabric_lib::transport::ipc;
  auto a = IpcAddress::decode(std::span<const uint8_t>(data, size));
  if (!a.ok()) {
    if (a.status().code() != fabric_lib::ErrorCode::kMalformed) std::abort();
    return 0;
  }
  if (!valid_segment_name(a->segment_name) || a->owner.pid == 0) std::abort();
  const std::vector<uint8_t> again = a->encode();
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  ProcessIdentity other = a->owner;
  if (!check_reachable(*a, other).ok()) std::abort();  // its own identity reaches it
  other.boot_id[0] ^= 1;
  if (check_reachable(*a, other).code() != fabric_lib::ErrorCode::kPeerUnreachable) std::abort();
  other = a->owner;
  other.pid_namespace ^= 1;
  if (check_reachable(*a, other).code() != fabric_lib::ErrorCode::kPeerUnreachable) std::abort();
  return 0;
}
