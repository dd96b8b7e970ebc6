// Registered buffers for two-sided messages: the send slots a worker copies outgoing messages
// into, and the pools of "bouncing" receive buffers that are posted again after each message.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fabric_lib/requests.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

// A block of equally sized buffers registered on one domain.
struct BufferBlock {
  std::unique_ptr<uint8_t[]> memory;
  size_t slot_bytes = 0;
  size_t count = 0;
  transport::DomainMr mr;

  uint8_t* slot(size_t i) const { return memory.get() + i * slot_bytes; }
  static Result<BufferBlock> allocate(transport::Domain& domain, size_t count, size_t slot_bytes);
};

class SendSlots {
 public:
  // Lazily registers `count` slots of `slot_bytes` on `domain`.
  Status init(transport::Domain& domain, size_t count, size_t slot_bytes);
  bool ready() const { return block_.memory != nullptr; }
  // Returns a free slot index, or -1 when all are in use.
  int acquire() {
    if (free_.empty()) return -1;
    int i = free_.back();
    free_.pop_back();
    return i;
  }
  void release(int i) { free_.push_back(i); }
  const BufferBlock& block() const { return block_; }

 private:
  BufferBlock block_;
  std::vector<int> free_;
};

struct RecvPool;

// Context of one posted receive buffer.
struct RecvSlot {
  RecvPool* pool = nullptr;
  size_t index = 0;
};

// Receive buffers of equal size: the engine's own (post_recvs: `owned`) or a range of a caller's
// registered region (post_recvs_into: `region` keeps its registration open).
struct RecvPool {
  BufferBlock owned;
  std::shared_ptr<const void> region;
  uint8_t* base = nullptr;
  size_t slot_bytes = 0;
  void* desc = nullptr;  // the local descriptor of the memory on domain 0
  RecvCallback on_recv;
  RecvErrorCallback on_error;
  std::vector<RecvSlot> slots;

  uint8_t* slot(size_t i) const { return base + i * slot_bytes; }
};

}  // namespace fabric_lib::detail
