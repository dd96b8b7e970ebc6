#include <limits>

#include "base/mr_desc_fields.h"
#include "fabric_lib/byte_codec.h"
#include "fabric_lib/memory.h"

namespace fabric_lib {

namespace {

constexpr uint8_t kMagic[4] = {'F', 'L', 'M', 'D'};
constexpr uint8_t kKnownAccessBits = 3;

bool valid_transport(uint8_t t) {
  return t == static_cast<uint8_t>(TransportKind::kLibfabric) || t == static_cast<uint8_t>(TransportKind::kSameHostIpc);
}
bool valid_kind(uint8_t k) { return k <= static_cast<uint8_t>(MemoryKind::kCuda); }

Status validate(uint64_t length, const std::vector<MrDomainEntry>& domains) {
  if (length == 0) return malformed("memory region of length 0");
  if (domains.empty() || domains.size() > kMaxDomainsPerGroup) {
    return malformed("descriptor with " + std::to_string(domains.size()) + " domains (1.." +
                     std::to_string(kMaxDomainsPerGroup) + " allowed)");
  }
  for (size_t i = 0; i < domains.size(); ++i) {
    const MrDomainEntry& d = domains[i];
    const std::string where = "domain " + std::to_string(i) + ": ";
    if (d.address.empty() || d.address.bytes().size() > kMaxDomainAddressBytes) {
      return malformed(where + "address of " + std::to_string(d.address.bytes().size()) + " bytes");
    }
    if (d.transport_blob.size() > kMaxTransportBlobBytes) {
      return malformed(where + "transport blob of " + std::to_string(d.transport_blob.size()) + " bytes");
    }
    if (d.addr_base > std::numeric_limits<uint64_t>::max() - length) {
      return malformed(where + "address base + length overflows 64 bits");
    }
  }
  return ok_status();
}

}  // namespace

Result<MrDesc> MrDesc::create(TransportKind transport, MemoryKind kind, uint64_t ptr, uint64_t length, Access access,
                              std::vector<MrDomainEntry> domains) {
  if (!valid_transport(static_cast<uint8_t>(transport))) return malformed("unknown transport kind");
  if (!valid_kind(static_cast<uint8_t>(kind))) return malformed("unknown memory kind");
  if (static_cast<uint8_t>(access) & ~kKnownAccessBits) return malformed("unknown access bits");
  FABRIC_LIB_RETURN_IF_ERROR(validate(length, domains));
  MrDesc d;
  d.data_ = std::make_shared<const Data>(Data{transport, kind, ptr, length, access, std::move(domains)});
  return d;
}

std::vector<uint8_t> MrDesc::to_bytes() const {
  if (!data_) return {};
  codec::ByteWriter w;
  w.bytes(kMagic);
  w.u8(kMrDescFormatVersion);
  w.u8(static_cast<uint8_t>(data_->transport));
  w.u8(static_cast<uint8_t>(data_->access));
  w.u8(static_cast<uint8_t>(data_->kind));
  w.u64(data_->ptr);
  w.u64(data_->length);
  w.u16(static_cast<uint16_t>(data_->domains.size()));
  for (const MrDomainEntry& d : data_->domains) {
    w.u16(static_cast<uint16_t>(d.address.bytes().size()));
    w.bytes(d.address.bytes());
    w.u64(d.rkey);
    w.u64(d.addr_base);
    w.u16(static_cast<uint16_t>(d.transport_blob.size()));
    w.bytes(d.transport_blob);
  }
  return w.take();
}

std::string MrDesc::to_hex() const { return fabric_lib::to_hex(to_bytes()); }

Result<MrDesc> MrDesc::from_bytes(std::span<const uint8_t> bytes) {
  codec::ByteReader r(bytes);
  std::vector<uint8_t> magic;
  if (!r.bytes(4, magic) || std::memcmp(magic.data(), kMagic, 4) != 0) return malformed("not a MrDesc (bad magic)");
  uint8_t version = 0, transport = 0, access = 0, kind = 0;
  if (!r.u8(version) || !r.u8(transport) || !r.u8(access) || !r.u8(kind)) return malformed("MrDesc header truncated");
  if (version != kMrDescFormatVersion) {
    return malformed("MrDesc format version " + std::to_string(version) + " (this build reads " +
                     std::to_string(kMrDescFormatVersion) + ")");
  }
  if (!valid_transport(transport)) return malformed("MrDesc names unknown transport " + std::to_string(transport));
  if (access & ~kKnownAccessBits) return malformed("MrDesc has unknown access bits");
  if (!valid_kind(kind)) return malformed("MrDesc names unknown memory kind " + std::to_string(kind));
  uint64_t ptr = 0, length = 0;
  uint16_t count = 0;
  if (!r.u64(ptr) || !r.u64(length) || !r.u16(count)) return malformed("MrDesc header truncated");
  if (count == 0 || count > kMaxDomainsPerGroup) {
    return malformed("MrDesc with " + std::to_string(count) + " domains (1.." + std::to_string(kMaxDomainsPerGroup) +
                     " allowed)");
  }
  std::vector<MrDomainEntry> domains(count);
  for (uint16_t i = 0; i < count; ++i) {
    uint16_t addr_len = 0, blob_len = 0;
    std::vector<uint8_t> addr;
    MrDomainEntry& d = domains[i];
    if (!r.u16(addr_len)) return malformed("MrDesc truncated in domain " + std::to_string(i));
    if (addr_len == 0 || addr_len > kMaxDomainAddressBytes) {
      return malformed("MrDesc domain " + std::to_string(i) + " has an address of " + std::to_string(addr_len) + " bytes");
    }
    if (!r.bytes(addr_len, addr) || !r.u64(d.rkey) || !r.u64(d.addr_base) || !r.u16(blob_len)) {
      return malformed("MrDesc truncated in domain " + std::to_string(i));
    }
    if (blob_len > kMaxTransportBlobBytes) {
      return malformed("MrDesc domain " + std::to_string(i) + " has a transport blob of " + std::to_string(blob_len) +
                       " bytes");
    }
    if (!r.bytes(blob_len, d.transport_blob)) return malformed("MrDesc truncated in domain " + std::to_string(i));
    Result<DomainAddress> a = DomainAddress::from_bytes(addr);
    if (!a.ok()) return a.status();
    d.address = std::move(a).value();
  }
  if (!r.at_end()) return malformed("MrDesc followed by " + std::to_string(r.remaining()) + " extra bytes");
  return create(static_cast<TransportKind>(transport), static_cast<MemoryKind>(kind), ptr, length,
                static_cast<Access>(access), std::move(domains));
}

Result<MrDesc> MrDesc::from_hex(std::string_view hex) {
  Result<std::vector<uint8_t>> bytes = fabric_lib::from_hex(hex);
  if (!bytes.ok()) return bytes.status();
  return from_bytes(*bytes);
}

TransportKind MrDesc::transport() const { return data_ ? data_->transport : TransportKind::kLibfabric; }
MemoryKind MrDesc::memory_kind() const { return data_ ? data_->kind : MemoryKind::kHost; }
uint64_t MrDesc::ptr() const { return data_ ? data_->ptr : 0; }
uint64_t MrDesc::length() const { return data_ ? data_->length : 0; }
Access MrDesc::access() const { return data_ ? data_->access : Access::kLocalOnly; }
size_t MrDesc::num_domains() const { return data_ ? data_->domains.size() : 0; }
const MrDomainEntry& MrDesc::domain(size_t i) const {
  static const MrDomainEntry kNone;
  return data_ && i < data_->domains.size() ? data_->domains[i] : kNone;
}

bool operator==(const MrDesc& a, const MrDesc& b) {
  if (a.data_ == b.data_) return true;
  if (!a.data_ || !b.data_) return false;
  const auto& x = *a.data_;
  const auto& y = *b.data_;
  return x.transport == y.transport && x.kind == y.kind && x.ptr == y.ptr && x.length == y.length &&
         x.access == y.access && x.domains == y.domains;
}

}  // namespace fabric_lib
