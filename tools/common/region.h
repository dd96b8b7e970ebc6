// Region: the bytes of one registered region as test agents and benchmark targets see them,
// wherever they live — host memory (HostRegion, here) or GPU memory (cuda_region.h) — read,
// written and hashed through copies, so one command table serves both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"

namespace fabric_lib::tools {

class Region {
 public:
  virtual ~Region() = default;
  // The address to register (a device pointer for GPU memory).
  virtual uint8_t* data() const = 0;
  virtual size_t size() const = 0;
  virtual MemoryKind kind() const = 0;
  // Copies [offset, offset + n) out of / into the region (OutOfRange beyond it).
  virtual Status read(uint64_t offset, uint8_t* out, size_t n) const = 0;
  virtual Status write(uint64_t offset, const uint8_t* in, size_t n) = 0;
  virtual Status zero() = 0;

  // Lower-case hex FNV-1a (pattern.h) of [offset, offset + n).
  Result<std::string> hash(uint64_t offset, uint64_t n) const;
  // Writes pattern `seed` (pattern.h) over the whole region.
  Status fill(uint64_t seed);

 protected:
  Status check_range(uint64_t offset, uint64_t n) const;
};

// Zeroed, 4 KiB-aligned host memory (page-aligned like the registrations real users make).
Result<std::unique_ptr<Region>> make_host_region(size_t bytes);

}  // namespace fabric_lib::tools
