// What the engine core runs with: the settings of TransferEngineBuilder after validation and
// environment overrides, the domains to open per group, and the factory that opens them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "fabric_lib/health.h"
#include "fabric_lib/idle_policy.h"
#include "fabric_lib/imm_counter.h"
#include "transport/domain_factory.h"

namespace fabric_lib::detail {

struct EngineOptions {
  std::vector<std::vector<transport::DomainSpec>> groups;  // the domains of each group
  transport::DomainFactory open_domain;
  std::map<size_t, int> worker_cpus;
  int watcher_cpu = -1;  // -1: the UVM watcher thread is not pinned
  IdlePolicy idle_policy = IdlePolicy::kAdaptive;
  size_t max_inflight_per_domain = 0;  // 0 = provider's
  size_t max_message_bytes = 64 * 1024;
  size_t imm_table_capacity = ImmCounter::kDefaultCapacity;
  bool record_submit_latency = false;
  bool metrics = true;  // latency histograms and per-peer metrics (TransferEngineBuilder::metrics())
  std::chrono::nanoseconds default_timeout{0};
  std::chrono::nanoseconds stall_timeout{std::chrono::seconds(10)};
  std::chrono::nanoseconds peer_retry_interval{std::chrono::seconds(1)};
  std::chrono::nanoseconds probe_interval{0};
  uint32_t probe_misses = 3;
  HealthCallback on_health_event;
  bool post_on_caller = true;
  bool trust_provider_calls = false;  // post_on_caller even where a call may hang (TransferEngineBuilder)
  // On groups whose domains share one medium (the ipc backend), default-routed requests all start
  // on domain 0 (false; measured faster or equal on one H100, docs/gpu.md "One domain carries a
  // one-medium group's requests") or rotate over the domains (true, as before 2026-12-07).
  // Environment only: FABRIC_LIB_ONE_MEDIUM_SPREAD=1.
  bool one_medium_spread = false;

  size_t domains_per_group() const { return groups.empty() ? 0 : groups[0].size(); }
};

}  // namespace fabric_lib::detail
