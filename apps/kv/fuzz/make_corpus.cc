// Writes one valid message of every type (a few dispatch shapes) into a directory: the fuzzer's
// seed corpus, generated from the codec itself so it never goes stale.
#include <cstdio>
#include <string>

#include "fabric_lib/kv/messages.h"

using namespace fabric_lib;
using namespace fabric_lib::kv;

namespace {
DomainAddress address(uint8_t seed) {
  std::vector<uint8_t> b(16, seed);
  return *DomainAddress::from_bytes(b);
}
MrDesc region(uint64_t length, size_t domains) {
  std::vector<MrDomainEntry> e;
  for (size_t d = 0; d < domains; ++d) e.push_back({address(static_cast<uint8_t>(d)), 40 + d, 0, {}});
  return *MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 0x1000, length, Access::kRemoteWrite, e);
}
void write(const std::string& dir, const std::string& name, const MessageBody& body, Role role) {
  const std::vector<uint8_t> b = encode_message({{MessageType::kHeartbeat, role, 99, address(1)}, body});
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  if (!f) return;
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}
DispatchMessage dispatch(AttentionKind kind, KvPacking packing, uint32_t prefill_tp, size_t domains) {
  DispatchMessage m;
  m.request_id = "r";
  m.layout = {kind, DType::kBF16, 2, 4, 8, kind == AttentionKind::kMla ? 1u : 2u};
  m.fingerprint = m.layout.fingerprint();
  m.decoder = {0, 1, packing};
  m.prefill_tp = prefill_tp;
  m.domains = static_cast<uint16_t>(domains);
  m.num_tokens = 9;
  m.dst_pages = {3, 0, 2};
  m.imm = 7;
  m.timeout_ms = 10;
  uint64_t total = 0;
  m.memory = KvMemoryLayout::contiguous(m.layout, 1, packing, 4, 0, 0, &total);
  m.regions = {region(total + 64, domains)};
  m.has_tail = true;
  m.tail_offset = total;
  m.tail_length = 64;
  return m;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  write(dir, "dispatch_gqa", dispatch(AttentionKind::kGqa, KvPacking::kSeparate, 1, 1), Role::kDecoder);
  write(dir, "dispatch_stacked_4dom", dispatch(AttentionKind::kGqa, KvPacking::kStacked, 2, 4), Role::kDecoder);
  write(dir, "dispatch_mla", dispatch(AttentionKind::kMla, KvPacking::kSeparate, 1, 2), Role::kDecoder);
  write(dir, "cancel", CancelMessage{"r", 7, 10}, Role::kDecoder);
  write(dir, "confirm", CancelConfirmMessage{"r", 7, CancelOutcome::kStopped, 3}, Role::kPrefiller);
  write(dir, "reject", RejectMessage{"r", 7, ErrorCode::kInvalidArgument, false, "layout"}, Role::kPrefiller);
  write(dir, "heartbeat", HeartbeatMessage{2}, Role::kPrefiller);
  return 0;
}
