// The controller of RL weight transfer: gathers every trainer's and inference rank's metadata
// over SEND/RECV (no shared filesystem, no global init), validates it, computes the static
// schedule (plan.h) and hands every rank its part. Runs once per training job (or whenever the
// parameter layout changes), typically in trainer rank 0's process, on an engine of its own.
//
// Protocol (codec.h): every rank sends a hello (its metadata) to address(); the controller
// answers each trainer with a TrainerSetup and each inference rank with an InferenceSetup, or
// everyone with a PlanError naming the problem; trainers register their staging buffers and send
// TrainerReady; the controller then sends every trainer the Peers message. The ranks' connect()
// returns after that.
#pragma once

#include <chrono>
#include <memory>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/plan.h"

namespace fabric_lib::weights {

struct ControllerOptions {
  uint32_t trainers = 0;    // how many trainer ranks will say hello
  uint32_t inference = 0;   // how many inference ranks will say hello
  PlanOptions plan;
  // The whole setup (all hellos, all readies) must finish within this. Default 60 s.
  std::chrono::milliseconds setup_timeout{60000};
  // Largest SEND frame: at most the engine's max_message_bytes. Default 60 KiB.
  size_t frame_bytes = 60 * 1024;
};

class Controller {
 public:
  // Takes over `engine`'s receive path (post_recvs). `engine` must outlive the controller.
  static Result<std::unique_ptr<Controller>> create(TransferEngine& engine, ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Where ranks send their hellos (the engine's main address).
  DomainAddress address() const;

  // Runs the setup; blocks until it is done. Returns the schedule, or the first error: invalid
  // metadata (also sent to every rank that said hello), a timeout naming the ranks that did not
  // report, or a send failure. Call once.
  Result<Schedule> run();

 private:
  struct State;
  explicit Controller(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fabric_lib::weights
