// The engine configuration both sides of fabric-bench agree on, and how each builds its engine.
#pragma once

#include <memory>
#include <string>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::bench {

struct EngineConfig {
  std::string provider = "tcp";
  size_t domains = 1;
  std::string interface_name;  // "" = the provider's default NIC
  bool spin = false;           // IdlePolicy::kSpin (the initiator's choice; targets stay adaptive)
  bool trust = false;          // TransferEngineBuilder::trust_provider_calls (--trust-provider-calls)
};

// Builds an engine for `config`. `record_submit_latency` turns on the engine's submit-to-post
// clock (the submit mode only: it costs a clock read per submit); `metrics` is
// TransferEngineBuilder::metrics() (off only in the metrics mode's baseline).
Result<std::unique_ptr<TransferEngine>> build_bench_engine(const EngineConfig& config, bool record_submit_latency,
                                                           bool metrics = true);

// "setup" command words and back (interface "" travels as "-").
std::string encode_engine_config(const EngineConfig& config);
Result<EngineConfig> decode_engine_config(const std::string& provider, const std::string& domains,
                                          const std::string& interface_name, const std::string& spin,
                                          const std::string& trust);

}  // namespace fabric_lib::bench
