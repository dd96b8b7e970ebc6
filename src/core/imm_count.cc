// imm_count_of(): the receiver's side of the sharding rules in shard_planner.
#include "core/shard_planner.h"
#include "fabric_lib/requests.h"

namespace fabric_lib {

uint64_t imm_count_of_write(uint64_t length, const Route& route, size_t domains) {
  return planner::count_contiguous(length, route, domains);
}

uint64_t imm_count_of(const WriteRequest& request, size_t domains) {
  return request.imm ? imm_count_of_write(request.length, request.route, domains) : 0;
}

uint64_t imm_count_of(const PagedWriteRequest& request, size_t /*domains*/) {
  return request.imm ? request.src_pages.size() : 0;
}

uint64_t imm_count_of(const ScatterRequest& request, size_t target_index, size_t domains) {
  if (!request.imm || target_index >= request.targets.size()) return 0;
  const uint64_t length = request.targets[target_index].length;
  if (request.sharding == ScatterSharding::kByBytes) return imm_count_of_write(length, request.route, domains);
  return imm_count_of_write(length, Pinned{0}, domains);
}

}  // namespace fabric_lib
