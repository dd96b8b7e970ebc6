// The settings a TransferEngineBuilder records.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fabric_lib/transfer_engine.h"

namespace fabric_lib {

struct TransferEngineBuilder::Options {
  std::string provider = "tcp";
  size_t domains_per_group = 1;
  size_t groups = 1;
  std::vector<std::string> interfaces;
  std::map<size_t, std::vector<std::string>> group_interfaces;
  std::map<size_t, int> worker_cpus;
  int watcher_cpu = -1;  // -1: the UVM watcher thread is not pinned
  IdlePolicy idle_policy = IdlePolicy::kAdaptive;
  size_t max_inflight_per_domain = 0;  // 0 = provider's
  size_t max_message_bytes = 64 * 1024;
  size_t imm_table_capacity = ImmCounter::kDefaultCapacity;
  uint64_t reorder_seed = 0;
  bool record_submit_latency = false;
  std::chrono::nanoseconds default_timeout{0};
  std::chrono::nanoseconds stall_timeout{std::chrono::seconds(10)};
  std::chrono::nanoseconds peer_retry_interval{std::chrono::seconds(1)};
  std::chrono::nanoseconds probe_interval{0};
  uint32_t probe_misses = 3;
  HealthCallback on_health_event;
};

}  // namespace fabric_lib
