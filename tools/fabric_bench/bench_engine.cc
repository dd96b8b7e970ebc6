#include "fabric_bench/bench_engine.h"

namespace fabric_lib::bench {

Result<std::unique_ptr<TransferEngine>> build_bench_engine(const EngineConfig& config, bool record_submit_latency,
                                                           bool metrics) {
  TransferEngineBuilder builder;
  builder.provider(config.provider)
      .domains_per_group(config.domains)
      .idle_policy(config.spin ? IdlePolicy::kSpin : IdlePolicy::kAdaptive)
      .record_submit_latency(record_submit_latency)
      .metrics(metrics)
      .trust_provider_calls(config.trust);
  if (!config.interface_name.empty()) builder.interfaces({config.interface_name});
  return builder.build();
}

std::string encode_engine_config(const EngineConfig& config) {
  return config.provider + " " + std::to_string(config.domains) + " " +
         (config.interface_name.empty() ? "-" : config.interface_name) + " " + (config.spin ? "1" : "0") + " " +
         (config.trust ? "1" : "0");
}

Result<EngineConfig> decode_engine_config(const std::string& provider, const std::string& domains,
                                          const std::string& interface_name, const std::string& spin,
                                          const std::string& trust) {
  EngineConfig c;
  c.provider = provider;
  try {
    c.domains = std::stoul(domains);
  } catch (...) {
    return malformed("bad domain count '" + domains + "'");
  }
  c.interface_name = interface_name == "-" ? "" : interface_name;
  c.spin = spin == "1";
  c.trust = trust == "1";
  return c;
}

}  // namespace fabric_lib::bench
