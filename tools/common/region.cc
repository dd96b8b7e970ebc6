#include "common/region.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/pattern.h"

namespace fabric_lib::tools {
namespace {

class HostRegion final : public Region {
 public:
  HostRegion(uint8_t* p, size_t size) : p_(p), size_(size) {}
  ~HostRegion() override { std::free(p_); }
  uint8_t* data() const override { return p_; }
  size_t size() const override { return size_; }
  MemoryKind kind() const override { return MemoryKind::kHost; }
  Status read(uint64_t offset, uint8_t* out, size_t n) const override {
    FABRIC_LIB_RETURN_IF_ERROR(check_range(offset, n));
    if (n) std::memcpy(out, p_ + offset, n);
    return ok_status();
  }
  Status write(uint64_t offset, const uint8_t* in, size_t n) override {
    FABRIC_LIB_RETURN_IF_ERROR(check_range(offset, n));
    if (n) std::memcpy(p_ + offset, in, n);
    return ok_status();
  }
  Status zero() override {
    std::memset(p_, 0, size_);
    return ok_status();
  }

 private:
  uint8_t* p_;
  size_t size_;
};

}  // namespace

Status Region::check_range(uint64_t offset, uint64_t n) const {
  if (offset > size() || n > size() - offset) {
    return out_of_range("[" + std::to_string(offset) + ", +" + std::to_string(n) + ") of a " +
                        std::to_string(size()) + "-byte region");
  }
  return ok_status();
}

Result<std::string> Region::hash(uint64_t offset, uint64_t n) const {
  FABRIC_LIB_RETURN_IF_ERROR(check_range(offset, n));
  std::vector<uint8_t> host(n);
  FABRIC_LIB_RETURN_IF_ERROR(read(offset, host.data(), n));
  return fnv1a_hex(host.data(), n);
}

Status Region::fill(uint64_t seed) {
  std::vector<uint8_t> host(size());
  fill_pattern(host.data(), host.size(), seed);
  return write(0, host.data(), host.size());
}

Result<std::unique_ptr<Region>> make_host_region(size_t bytes) {
  const size_t rounded = bytes == 0 ? 4096 : (bytes + 4095) / 4096 * 4096;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (!p) return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return std::unique_ptr<Region>(new HostRegion(p, bytes));
}

}  // namespace fabric_lib::tools
