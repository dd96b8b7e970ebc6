// TrainerEndpoint's state (internal): what connect() set up and what every send() reuses.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "arena.h"
#include "fabric_lib/weights/trainer.h"
#include "mailbox.h"
#include "preparer.h"
#include "step_metrics.h"

namespace fabric_lib::weights {

struct TrainerEndpoint::State {
  TransferEngine* engine = nullptr;
  TrainerOptions options;
  detail::StepMetrics step_metrics;  // every send()'s StepStats, on the engine's MetricsRegistry
  std::shared_ptr<detail::Mailbox> mailbox;
  TrainerMetadata metadata;
  struct Region {
    MrRegistration reg;
    uint8_t* ptr = nullptr;
    size_t length = 0;
    MemoryKind kind = MemoryKind::kHost;
  };
  std::vector<Region> regions;

  std::mutex mu;  // guards the three setup messages below
  std::condition_variable cv;
  std::optional<TrainerSetup> setup;
  std::optional<Peers> peers;
  std::optional<std::string> plan_error;
  bool connected = false;
  bool ready = false;  // connect() succeeded

  // After connect(): descriptors by plan target, barrier peers, staging and arena.
  std::vector<MrDesc> targets;
  std::vector<MrDesc> barrier_peers;
  std::vector<uint8_t> staging;
  MrRegistration staging_reg;
  std::unique_ptr<detail::Preparer> preparer;
  uint8_t* arena_memory = nullptr;  // owned by the preparer (host or GPU memory)
  MrRegistration arena_reg;
  std::unique_ptr<detail::Arena> arena;
  StepStats last;

  void on_message(std::vector<uint8_t> m);
  Status check_plan() const;
};

}  // namespace fabric_lib::weights
