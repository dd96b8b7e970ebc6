#include "base/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace fabric_lib {
namespace {

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

bool register_membarrier() {
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool asymmetric_fences_available() {
  static const bool available = register_membarrier();
  return available;
}

void asymmetric_heavy_fence() {
  if (!asymmetric_fences_available() || membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

}  // namespace fabric_lib
