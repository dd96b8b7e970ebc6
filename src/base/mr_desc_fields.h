// MrDesc's fields for the engine's hot path: the checks and WR building of every submit read
// a destination descriptor's transport, domain count, access, length and per-domain entries —
// five out-of-line calls through the public accessors, per target. Here they are plain loads.
// MrDesc::Data lives here (not in the public header) so its layout stays the library's own.
#pragma once

#include <vector>

#include "fabric_lib/memory.h"

namespace fabric_lib {

struct MrDesc::Data {
  TransportKind transport;
  MemoryKind kind;
  uint64_t ptr;
  uint64_t length;
  Access access;
  std::vector<MrDomainEntry> domains;
};

namespace detail {

class MrDescFields {
 public:
  using Data = MrDesc::Data;
  // The descriptor's fields; null when it is empty.
  static const Data* of(const MrDesc& desc) { return desc.data_.get(); }
  // desc.domain(i) inline: its entry for domain i (an empty entry past its domains, as there).
  static const MrDomainEntry& domain(const MrDesc& desc, size_t i) {
    const Data* d = desc.data_.get();
    return d && i < d->domains.size() ? d->domains[i] : desc.domain(i);
  }
};

}  // namespace detail
}  // namespace fabric_lib
