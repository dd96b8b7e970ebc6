// Writes the checked-in seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): one valid
// input per message kind and variant, and the edge cases around each limit, so that a fixed
// number of runs (run_fuzzers.sh) starts from every shape a decoder accepts. Rebuild the corpus:
//   clang++ -std=c++20 -Iinclude -Isrc tests/fuzz/make_seeds.cc src/base/{mr_desc,domain_address,status}.cc \
//     src/core/probe_message.cc src/transport/ipc/{ipc_address,mpsc_ring,process_identity}.cc -o /tmp/make_seeds
//   /tmp/make_seeds tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/probe_message.h"
#include "fabric_lib/domain_address.h"
#include "fabric_lib/memory.h"
#include "transport/ipc/ipc_address.h"
#include "transport/ipc/mpsc_ring.h"

namespace {

using namespace fabric_lib;
namespace fs = std::filesystem;

fs::path g_root;

void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<uint8_t> text(const std::string& s) { return {s.begin(), s.end()}; }

DomainAddress addr(size_t n, uint8_t fill) { return *DomainAddress::from_bytes(std::vector<uint8_t>(n, fill)); }

void mr_desc_seeds() {
  auto entry = [](size_t addr_len, uint64_t rkey, uint64_t base, size_t blob) {
    return MrDomainEntry{addr(addr_len, 0x11), rkey, base, std::vector<uint8_t>(blob, 0xb1)};
  };
  auto put_desc = [](const std::string& name, TransportKind t, MemoryKind k, Access a, std::vector<MrDomainEntry> e) {
    Result<MrDesc> d = MrDesc::create(t, k, 0x7f0000001000, 1 << 20, a, std::move(e));
    if (!d.ok()) {
      std::fprintf(stderr, "seed %s: %s\n", name.c_str(), d.status().to_string().c_str());
      std::exit(1);
    }
    put("mr_desc", name, d->to_bytes());
    put("mr_desc", name + ".hex", text(d->to_hex()));  // from_hex gets the same input
  };
  put_desc("libfabric_host_1dom", TransportKind::kLibfabric, MemoryKind::kHost, Access::kRemoteWrite, {entry(16, 7, 0, 0)});
  put_desc("libfabric_cuda_4dom", TransportKind::kLibfabric, MemoryKind::kCuda, Access::kRemoteReadWrite,
           {entry(16, 1, 0x1000, 0), entry(16, 2, 0x2000, 0), entry(16, 3, 0x3000, 0), entry(16, 4, 0x4000, 0)});
  put_desc("ipc_blob", TransportKind::kSameHostIpc, MemoryKind::kCuda, Access::kRemoteWrite, {entry(64, 9, 0, 64)});
  put_desc("local_only", TransportKind::kLibfabric, MemoryKind::kHost, Access::kLocalOnly, {entry(1, 0, 0, 0)});
  std::vector<MrDomainEntry> many;
  for (size_t d = 0; d < kMaxDomainsPerGroup; ++d) many.push_back(entry(kMaxDomainAddressBytes, d, d, 0));
  put_desc("max_domains_max_address", TransportKind::kLibfabric, MemoryKind::kHost, Access::kRemoteWrite, many);
  put_desc("max_blob", TransportKind::kSameHostIpc, MemoryKind::kHost, Access::kRemoteWrite,
           {entry(8, 1, 0, kMaxTransportBlobBytes)});
  std::vector<uint8_t> one = MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 1, 1, Access::kRemoteWrite,
                                            {entry(16, 7, 0, 0)})->to_bytes();
  one.pop_back();
  put("mr_desc", "truncated", one);
  put("mr_desc", "magic_only", text("FLMD"));
}

void domain_address_seeds() {
  put("domain_address", "one_byte", {0x01});
  put("domain_address", "max_length", std::vector<uint8_t>(kMaxDomainAddressBytes, 0xa5));
  put("domain_address", "too_long", std::vector<uint8_t>(kMaxDomainAddressBytes + 1, 0xa5));
  std::vector<uint8_t> in6(28, 0);
  in6[0] = 10;  // AF_INET6
  in6[23] = 1;  // ::1
  put("domain_address", "sockaddr_in6", in6);
  put("domain_address", "hex_upper", text("0A0B0C0D"));
  put("domain_address", "hex_odd", text("abc"));
}

void probe_seeds() {
  using detail::ProbeMessage;
  auto put_probe = [](const std::string& name, ProbeMessage::Type type, uint16_t domain, size_t key, size_t address) {
    ProbeMessage m;
    m.type = type;
    m.domain = domain;
    m.seq = 0x0102030405060708ull;
    m.key.assign(key, 0x4b);
    m.address.assign(address, 0x41);
    put("probe_message", name, m.encode());
  };
  put_probe("ping_domain3", ProbeMessage::Type::kPing, 3, 16, 16);
  put_probe("pong_domain15", ProbeMessage::Type::kPong, 15, 16, 16);
  put_probe("ping_max", ProbeMessage::Type::kPing, 0, 256, 256);
  put_probe("pong_min", ProbeMessage::Type::kPong, 0, 1, 1);
}

void ipc_address_seeds() {
  using namespace transport::ipc;
  IpcAddress a;
  for (size_t i = 0; i < a.owner.boot_id.size(); ++i) a.owner.boot_id[i] = static_cast<uint8_t>(i * 17);
  a.owner.pid_namespace = 4026531836;
  a.owner.pid = 4242;
  a.owner.start_time = 123456;
  a.nonce = 0xfeedfacecafebeefull;
  a.segment_name = "fabric-lib-nvl-4242-123456-0";
  put("ipc_address", "valid", a.encode());
  a.segment_name = "x";
  put("ipc_address", "name_one_char", a.encode());
  a.segment_name = std::string(kMaxSegmentNameBytes, 'n');
  put("ipc_address", "name_max", a.encode());
  a.segment_name = "fabric-lib-nvl-1";
  std::vector<uint8_t> v = a.encode();
  v[4] = kAddressVersion + 1;
  put("ipc_address", "version_2", v);
  v = a.encode();
  v.push_back(0);
  put("ipc_address", "trailing_byte", v);
}

// A ring image as the fuzz target reads it: 8 bytes of producer position, then the slots.
void ring_seed(const std::string& name, const std::function<void(transport::ipc::RingView, std::vector<transport::ipc::Slot>&)>& fill) {
  using namespace transport::ipc;
  constexpr uint64_t kSlots = 64;
  auto header = std::make_unique<SegmentHeader>();
  std::vector<Slot> slots(kSlots);
  RingView ring{header.get(), slots.data(), kSlots};
  init_ring(ring);
  fill(ring, slots);
  std::vector<uint8_t> out(8, 0);
  const uint64_t pos = header->enqueue_pos.load();
  std::memcpy(out.data(), &pos, 8);
  size_t used = 0;
  for (size_t s = 0; s < kSlots; ++s) {
    if (word_state(slots[s].state.load()) != SlotState::kFree || word_position(slots[s].state.load()) != s) used = s + 1;
  }
  for (size_t s = 0; s < std::max<size_t>(used, 1); ++s) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&slots[s]);
    uint64_t word = slots[s].state.load();
    uint8_t raw[sizeof(Slot)];
    std::memcpy(raw, p, sizeof(Slot));
    std::memcpy(raw, &word, 8);
    out.insert(out.end(), raw, raw + sizeof(Slot));
  }
  put("ipc_ring", name, out);
}

void ring_seeds() {
  using namespace transport::ipc;
  auto fragments = [](RingProducer& p, uint64_t sender, uint32_t message, size_t length, bool control) {
    std::vector<uint8_t> bytes(length);
    for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<uint8_t>(i);
    size_t off = 0;
    do {
      const size_t n = std::min(length - off, kSlotPayloadBytes);
      RecordHeader h;
      h.type = RecordType::kFragment;
      h.flags = control ? kFlagControl : 0;
      h.value = message;
      h.sender = sender;
      h.sender_pid = 77;
      h.count = static_cast<uint32_t>(length);
      h.offset = static_cast<uint32_t>(off);
      p.push(h, std::span<const uint8_t>(bytes).subspan(off, n));
      off += n;
    } while (off < length);
  };
  ring_seed("imm_records", [](RingView ring, std::vector<Slot>&) {
    RingProducer p(ring, 77);
    for (uint32_t count : {1u, 2u, 4096u, kMaxImmRecordCount}) {
      RecordHeader h;
      h.value = 1000 + count;
      h.count = count;
      p.push(h);
    }
  });
  ring_seed("imm_bad_counts", [](RingView ring, std::vector<Slot>&) {
    RingProducer p(ring, 77);
    for (uint32_t count : {0u, kMaxImmRecordCount + 1}) {
      RecordHeader h;
      h.count = count;
      p.push(h);
    }
    RecordHeader with_payload;
    with_payload.count = 1;
    const uint8_t one = 1;
    p.push(with_payload, std::span<const uint8_t>(&one, 1));
  });
  ring_seed("message_three_fragments", [&](RingView ring, std::vector<Slot>&) {
    RingProducer p(ring, 77);
    fragments(p, 5, 1, 2 * kSlotPayloadBytes + 10, false);
  });
  ring_seed("messages_interleaved_and_control", [&](RingView ring, std::vector<Slot>&) {
    RingProducer a(ring, 77), b(ring, 78);
    fragments(a, 5, 1, 0, false);                   // an empty message
    fragments(b, 6, 9, kSlotPayloadBytes, true);    // a control message of one full slot
    fragments(a, 5, 2, kSlotPayloadBytes + 1, false);
    fragments(b, 6, 10, 600, false);                // longer than the receive buffers
  });
  ring_seed("claimed_then_ready", [](RingView ring, std::vector<Slot>& slots) {
    RingProducer p(ring, 77);
    RecordHeader h;
    h.count = 1;
    p.push(h);
    p.push(h);
    slots[0].state.store(slot_word(0, SlotState::kClaimed, 999));  // a producer that died mid-claim
  });
  ring_seed("garbage_type_and_length", [](RingView ring, std::vector<Slot>& slots) {
    RingProducer p(ring, 77);
    RecordHeader h;
    h.count = 1;
    p.push(h);
    p.push(h);
    p.push(h);
    slots[0].type = 9;
    slots[1].payload_len = static_cast<uint16_t>(kSlotPayloadBytes + 1);
    slots[2].state.store(slot_word(2, static_cast<SlotState>(3), 77));
  });
  ring_seed("full_ring", [](RingView ring, std::vector<Slot>&) {
    RingProducer p(ring, 77);
    RecordHeader h;
    h.count = 1;
    while (p.push(h) == RingProducer::Push::kPushed) {
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  g_root = argv[1];
  mr_desc_seeds();
  domain_address_seeds();
  probe_seeds();
  ipc_address_seeds();
  ring_seeds();
  return 0;
}
