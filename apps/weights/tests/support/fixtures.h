// Metadata of the test model for in-process tests: fake engine addresses and descriptors (the
// planner only reads their lengths and domain counts).
#pragma once

#include <string>
#include <vector>

#include "support/test_model.h"

namespace fabric_lib::weights::testing {

inline DomainAddress fake_address(const std::string& who) {
  std::vector<uint8_t> b(who.begin(), who.end());
  return *DomainAddress::from_bytes(b);
}

inline MrDesc fake_desc(const std::string& who, uint64_t length, uint32_t domains) {
  std::vector<MrDomainEntry> e;
  for (uint32_t d = 0; d < domains; ++d) e.push_back({fake_address(who + "/" + std::to_string(d)), 7 + d, 0, {}});
  return *MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 0x1000, length, Access::kRemoteWrite, e);
}

inline std::vector<TrainerMetadata> model_trainers(uint32_t world, uint32_t domains) {
  std::vector<TrainerMetadata> v;
  for (uint32_t r = 0; r < world; ++r) {
    v.push_back({r, world, fake_address("trainer" + std::to_string(r)), domains, trainer_layout(r, world).shards});
  }
  return v;
}

inline std::vector<InferenceMetadata> model_inference(uint32_t world, bool fp8, uint32_t domains) {
  std::vector<InferenceMetadata> v;
  for (uint32_t r = 0; r < world; ++r) {
    const InferenceLayout l = inference_layout(r, world, fp8);
    const std::string who = "inference" + std::to_string(r);
    v.push_back({r, world, fake_address(who), domains,
                 {fake_desc(who + "d", l.data_bytes, domains), fake_desc(who + "s", l.scale_bytes, domains)}, l.tensors});
  }
  return v;
}

}  // namespace fabric_lib::weights::testing
