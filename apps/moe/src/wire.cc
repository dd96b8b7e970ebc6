// RankInfo and route-block codecs (wire.h), on the public little-endian, bounds-checked byte
// reader/writer (fabric_lib/byte_codec.h).
#include "fabric_lib/moe/wire.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "fabric_lib/byte_codec.h"
#include "fabric_lib/moe/layout.h"

namespace fabric_lib::moe {
namespace {

using Writer = codec::ByteWriter;
using Reader = codec::ByteReader;

Status truncated(const char* what) { return malformed(std::string("RankInfo: truncated at ") + what); }

}  // namespace

std::vector<uint8_t> RankInfo::encode() const {
  Writer w;
  w.u32(kRankInfoMagic);
  w.u8(kRankInfoVersion);
  w.u8(static_cast<uint8_t>(path));
  w.u16(static_cast<uint16_t>(rank));
  w.u16(static_cast<uint16_t>(world));
  w.u16(static_cast<uint16_t>(domains));
  w.u64(fingerprint);
  w.u64(host_id);
  w.u32(pid);
  w.u16(static_cast<uint16_t>(address.bytes().size()));
  w.bytes(address.bytes());
  for (const MrDesc* d : {&route_recv, &dispatch_recv, &combine_recv}) {
    std::vector<uint8_t> b = d->empty() ? std::vector<uint8_t>{} : d->to_bytes();
    w.u32(static_cast<uint32_t>(b.size()));
    w.bytes(b);
  }
  w.u32(static_cast<uint32_t>(ipc_blob.size()));
  w.bytes(ipc_blob);
  return w.take();
}

Result<RankInfo> RankInfo::decode(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxRankInfoBytes) return malformed("RankInfo: longer than " + std::to_string(kMaxRankInfoBytes));
  Reader r(bytes);
  uint32_t magic = 0;
  uint8_t version = 0, path = 0;
  uint16_t rank = 0, world = 0, domains = 0, addr_len = 0;
  RankInfo info;
  if (!r.u32(magic)) return truncated("magic");
  if (magic != kRankInfoMagic) return malformed("RankInfo: bad magic");
  if (!r.u8(version)) return truncated("version");
  if (version != kRankInfoVersion) {
    return malformed("RankInfo: version " + std::to_string(version) + " (this build speaks " +
                     std::to_string(kRankInfoVersion) + ")");
  }
  if (!r.u8(path)) return truncated("path");
  if (path != static_cast<uint8_t>(Path::kProxy) && path != static_cast<uint8_t>(Path::kDirect)) {
    return malformed("RankInfo: unknown path " + std::to_string(path));
  }
  info.path = static_cast<Path>(path);
  if (!r.u16(rank) || !r.u16(world) || !r.u16(domains)) return truncated("rank/world/domains");
  if (world == 0 || world > kMaxWorldSize || rank >= world) return malformed("RankInfo: bad rank/world");
  if (domains == 0 || domains > kMaxDomainsPerGroup) return malformed("RankInfo: bad domain count");
  info.rank = rank;
  info.world = world;
  info.domains = domains;
  if (!r.u64(info.fingerprint) || !r.u64(info.host_id) || !r.u32(info.pid)) return truncated("identity");
  if (!r.u16(addr_len)) return truncated("address length");
  if (addr_len == 0 || addr_len > kMaxDomainAddressBytes) return malformed("RankInfo: bad address length");
  std::span<const uint8_t> addr;
  if (!r.bytes(addr_len, addr)) return truncated("address");
  Result<DomainAddress> a = DomainAddress::from_bytes(addr);
  if (!a.ok()) return malformed("RankInfo: address: " + a.status().message());
  info.address = *a;
  MrDesc* descs[] = {&info.route_recv, &info.dispatch_recv, &info.combine_recv};
  for (MrDesc* d : descs) {
    uint32_t len = 0;
    std::span<const uint8_t> b;
    if (!r.u32(len)) return truncated("descriptor length");
    if (!r.bytes(len, b)) return truncated("descriptor");
    if (len == 0) continue;  // kDirect ranks send no descriptors
    Result<MrDesc> m = MrDesc::from_bytes(b);
    if (!m.ok()) return malformed("RankInfo: descriptor: " + m.status().message());
    *d = *m;
  }
  uint32_t blob_len = 0;
  std::span<const uint8_t> blob;
  if (!r.u32(blob_len)) return truncated("ipc blob length");
  if (blob_len > kMaxIpcBlobBytes) return malformed("RankInfo: ipc blob too long");
  if (!r.bytes(blob_len, blob)) return truncated("ipc blob");
  info.ipc_blob.assign(blob.begin(), blob.end());
  if (!r.at_end()) return malformed("RankInfo: trailing bytes");
  if (info.path == Path::kProxy && (info.route_recv.empty() || info.dispatch_recv.empty() || info.combine_recv.empty())) {
    return malformed("RankInfo: a proxy-path rank must describe its three receive regions");
  }
  if (info.path == Path::kDirect && info.ipc_blob.empty()) return malformed("RankInfo: a direct-path rank needs IPC handles");
  return info;
}

uint64_t host_identity() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  id += '/';
  id += host;
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : id) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

void encode_route_block(uint32_t source, uint64_t step, std::span<const uint32_t> counts, std::span<uint8_t> out) {
  RouteHeader h{};
  uint32_t mix = 0, total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    mix += route_mix(static_cast<uint32_t>(i), counts[i]);
    total += counts[i];
  }
  h.magic = kRouteMagic;
  h.version = kRouteVersion;
  h.source = static_cast<uint16_t>(source);
  h.num_experts = static_cast<uint32_t>(counts.size());
  h.total = total;
  h.step = step;
  h.checksum = route_finish(mix, source, step, total, h.num_experts);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + kRouteHeaderBytes, counts.data(), counts.size() * 4);
}

Result<std::span<const uint32_t>> decode_route_block(std::span<const uint8_t> block, uint32_t expected_source,
                                                     uint64_t expected_step, uint32_t experts, uint32_t max_total) {
  const std::string who = "route block of rank " + std::to_string(expected_source) + ", step " +
                          std::to_string(expected_step) + ": ";
  if (block.size() < kRouteHeaderBytes + 4ull * experts) return malformed(who + "region too small");
  if (reinterpret_cast<uintptr_t>(block.data()) % alignof(uint64_t) != 0) return invalid_argument(who + "misaligned");
  RouteHeader h;
  std::memcpy(&h, block.data(), sizeof h);
  if (h.magic != kRouteMagic) return malformed(who + "bad magic");
  if (h.version != kRouteVersion) return malformed(who + "version " + std::to_string(h.version));
  if (h.source != expected_source) return malformed(who + "names source " + std::to_string(h.source));
  if (h.step != expected_step) return malformed(who + "is for step " + std::to_string(h.step));
  if (h.num_experts != experts) return malformed(who + std::to_string(h.num_experts) + " experts");
  if (h.reserved != 0) return malformed(who + "reserved field set");
  const uint32_t* counts = reinterpret_cast<const uint32_t*>(block.data() + kRouteHeaderBytes);
  uint64_t total = 0;
  uint32_t mix = 0;
  for (uint32_t i = 0; i < experts; ++i) {
    if (counts[i] > max_total) return malformed(who + "count " + std::to_string(counts[i]) + " too large");
    total += counts[i];
    mix += route_mix(i, counts[i]);
  }
  if (total > max_total || total != h.total) return malformed(who + "counts add up to " + std::to_string(total));
  if (h.checksum != route_finish(mix, h.source, h.step, h.total, h.num_experts)) return malformed(who + "bad checksum");
  return std::span<const uint32_t>(counts, experts);
}

}  // namespace fabric_lib::moe
