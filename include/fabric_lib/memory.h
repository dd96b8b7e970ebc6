// Memory registration types: access rights, the local MrHandle and the remote MrDesc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fabric_lib/domain_address.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

namespace detail {
class MrDescFields;
}  // namespace detail

// What peers may do with a registered region. Local use (as the source of writes and sends) is
// always allowed.
enum class Access : uint8_t {
  kLocalOnly = 0,
  kRemoteWrite = 1,  // peers may WRITE into it (the region can be a MrDesc target)
  kRemoteRead = 2,   // peers may READ from it (reserved: no READ operation is exposed yet)
  kRemoteReadWrite = 3,
};
constexpr Access operator|(Access a, Access b) {
  return static_cast<Access>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr bool has_access(Access set, Access bit) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(bit)) == static_cast<uint8_t>(bit);
}

// Where the registered bytes live.
enum class MemoryKind : uint8_t {
  kHost = 0,  // ordinary (pageable or pinned) host memory
  // CUDA device memory (cudaMalloc), checked with cudaPointerGetAttributes. Needs a CUDA build.
  // On a provider with FI_HMEM it is registered with the NIC (a source and a target); on any
  // other provider it can only be a local source: writes from it are staged through pinned host
  // bounce buffers, and a remote-write registration is refused (docs/gpu.md).
  kCuda = 1,
  // Only as an argument of register_memory: detect the kind (cudaPointerGetAttributes) and use
  // kHost or kCuda. kHost in builds without CUDA. Never stored in a MrDesc. (Registration does not
  // detect by default, so host-only programs never initialise CUDA.)
  kAuto = 255,
};

// CUDA memory that peer processes write into over the same-host IPC backend: a peer maps an
// imported allocation larger than 2 MiB whose size is not a multiple of 2 MiB so that its
// scattered writes into it run several times slower (one H200: 4096 pages of 4 KiB into 2 GiB +
// 4 KiB took 3.5x as long as into 2 GiB; docs/gpu.md, "Past L2"). Allocate such memory with
// peer_written_cuda_bytes(n) bytes; registering a region whose allocation breaks the rule logs a
// warning. PyTorch's caching allocator already rounds large blocks to multiples of 2 MiB.
inline constexpr size_t kCudaLargePageBytes = size_t{2} << 20;

// `bytes` (at least 1) as the size to cudaMalloc for memory peers write into: unchanged up to
// 2 MiB, else rounded up to a multiple of kCudaLargePageBytes (so at most 2 MiB - 1 more).
constexpr size_t peer_written_cuda_bytes(size_t bytes) {
  if (bytes == 0) return 1;
  if (bytes <= kCudaLargePageBytes) return bytes;
  return (bytes + kCudaLargePageBytes - 1) / kCudaLargePageBytes * kCudaLargePageBytes;
}

// Which transport produced a descriptor. A descriptor can only be used by an engine whose
// domains are of the same transport.
enum class TransportKind : uint8_t {
  kLibfabric = 1,
  kSameHostIpc = 2,  // the same-host IPC backend (provider "ipc", alias "nvlink")
};

// Local handle of a registered region, returned by TransferEngine::register_memory.
// A plain value: copying it does not keep the registration alive.
struct MrHandle {
  uint64_t id = 0;  // 0 = none
  bool valid() const { return id != 0; }
  friend bool operator==(MrHandle a, MrHandle b) { return a.id == b.id; }
};

// What a peer needs to reach a region through one domain of the owning engine's group.
struct MrDomainEntry {
  DomainAddress address;  // the owning domain's address
  uint64_t rkey = 0;      // remote key of the region on that domain
  // Remote address of byte 0 of the region on that domain: the virtual address when the provider
  // uses FI_MR_VIRT_ADDR, 0 when remote addresses are offsets (e.g. libfabric tcp).
  uint64_t addr_base = 0;
  // Transport-specific bytes (e.g. a CUDA IPC handle for the ipc domain); may be empty.
  std::vector<uint8_t> transport_blob;

  friend bool operator==(const MrDomainEntry&, const MrDomainEntry&) = default;
};

// Format limits enforced by MrDesc::create and MrDesc::from_bytes.
inline constexpr size_t kMaxDomainsPerGroup = 16;
inline constexpr size_t kMaxTransportBlobBytes = 1024;
inline constexpr uint8_t kMrDescFormatVersion = 1;

// Remote memory region descriptor: everything a peer needs to WRITE into a registered region.
// Immutable and cheap to copy (shared internally). Travels between processes as bytes or hex;
// from_bytes validates every field, since the bytes come from the network.
//
// Wire format (little endian), version 1:
//   "FLMD" | u8 version | u8 transport | u8 access | u8 memory kind | u64 ptr | u64 length |
//   u16 domain count | per domain: u16 address length, address, u64 rkey, u64 addr_base,
//                                  u16 blob length, blob
class MrDesc {
 public:
  MrDesc() = default;  // empty; every submit rejects it

  static Result<MrDesc> create(TransportKind transport, MemoryKind kind, uint64_t ptr, uint64_t length,
                               Access access, std::vector<MrDomainEntry> domains);
  static Result<MrDesc> from_bytes(std::span<const uint8_t> bytes);
  static Result<MrDesc> from_hex(std::string_view hex);

  std::vector<uint8_t> to_bytes() const;
  std::string to_hex() const;

  bool empty() const { return data_ == nullptr; }
  TransportKind transport() const;
  MemoryKind memory_kind() const;
  uint64_t ptr() const;     // the owner's virtual address of byte 0 (informational)
  uint64_t length() const;  // bytes in the region
  Access access() const;
  size_t num_domains() const;
  const MrDomainEntry& domain(size_t i) const;  // an empty entry when i >= num_domains()

  // The same for a descriptor and all its copies, different for any other live descriptor (even
  // an equal one decoded separately); null when empty. Lets a caller (and the engine) tell copies
  // of one descriptor apart from others in O(1).
  const void* identity() const { return data_.get(); }

  friend bool operator==(const MrDesc& a, const MrDesc& b);

 private:
  friend class detail::MrDescFields;  // the engine's hot path reads the fields inline
  struct Data;
  std::shared_ptr<const Data> data_;
};

// A local registration: the handle used as a source, and the descriptor to give to peers.
struct MrRegistration {
  MrHandle handle;
  MrDesc desc;
};

}  // namespace fabric_lib
