#include "core/message_buffers.h"

#include <new>

namespace fabric_lib::detail {

Result<BufferBlock> BufferBlock::allocate(transport::Domain& domain, size_t count, size_t slot_bytes) {
  BufferBlock b;
  if (count == 0 || slot_bytes == 0) return invalid_argument("buffer block of zero size");
  if (slot_bytes > (size_t{1} << 40) / count) return invalid_argument("buffer block too large");
  b.memory.reset(new (std::nothrow) uint8_t[count * slot_bytes]);
  if (!b.memory) return resource_exhausted("cannot allocate " + std::to_string(count * slot_bytes) + " bytes of buffers");
  b.slot_bytes = slot_bytes;
  b.count = count;
  Result<transport::DomainMr> mr = domain.register_memory(b.memory.get(), count * slot_bytes, Access::kLocalOnly,
                                                          MemoryKind::kHost);
  if (!mr.ok()) return mr.status();
  b.mr = *mr;
  return b;
}

Status SendSlots::init(transport::Domain& domain, size_t count, size_t slot_bytes) {
  Result<BufferBlock> block = BufferBlock::allocate(domain, count, slot_bytes);
  if (!block.ok()) return block.status();
  block_ = std::move(block).value();
  for (int i = static_cast<int>(count) - 1; i >= 0; --i) free_.push_back(i);
  return ok_status();
}

}  // namespace fabric_lib::detail
