// Executes a schedule in one process with memcpy in place of the engine's writes: the planner's
// output checked byte for byte without a network (the integration tests run the real thing).
#pragma once

#include <cstdint>
#include <vector>

#include "fabric_lib/weights/weights.h"

namespace fabric_lib::weights::testing {

// trainer_shards[t] / trainer_regions[t][i]: trainer t's shard list and its local regions;
// inference_regions[r][i]: inference rank r's regions. Writes outside a region fail the call.
Status simulate(const Schedule& s, const std::vector<std::vector<TrainerShard>>& trainer_shards,
                const std::vector<std::vector<std::vector<uint8_t>*>>& trainer_regions,
                const std::vector<std::vector<std::vector<uint8_t>*>>& inference_regions);

}  // namespace fabric_lib::weights::testing
