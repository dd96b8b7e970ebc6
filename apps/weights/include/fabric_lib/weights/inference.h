// The inference side of RL weight transfer: registers the model's destination tensors, tells
// the controller about them once, and then only learns, per version, whether the trainers wrote
// it completely. It does nothing per step: the trainers write straight into its memory.
//
// Version v is complete on this rank when every WR the schedule sends it for v has arrived (its
// data imm count, InferencePlan::data_imms) AND every trainer has reached its end-of-step barrier
// (done imms from all trainers). A version is never reported complete when it was written only
// partly: a trainer that dies mid-step makes the wait fail at its deadline.
//
// Thread safety: add_region/add_tensor/connect from one thread before any wait; on_version and
// wait_for_version from any thread after connect().
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/codec.h"
#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

struct InferenceOptions {
  uint32_t rank = 0, world = 1;       // this rank among all inference ranks (all instances)
  DomainAddress controller;           // Controller::address()
  std::chrono::milliseconds setup_timeout{60000};
  size_t frame_bytes = 60 * 1024;     // <= the engine's max_message_bytes
};

class InferenceEndpoint {
 public:
  using VersionCallback = std::function<void(uint64_t version, const Status& status)>;

  // Takes over `engine`'s receive path (post_recvs). `engine` must outlive the endpoint.
  static Result<std::unique_ptr<InferenceEndpoint>> create(TransferEngine& engine, InferenceOptions options);
  ~InferenceEndpoint();
  InferenceEndpoint(const InferenceEndpoint&) = delete;
  InferenceEndpoint& operator=(const InferenceEndpoint&) = delete;

  // Registers [ptr, ptr + length) for remote writes; returns its region index for
  // InferenceTensor::region / scale_region. Before connect().
  Result<uint32_t> add_region(void* ptr, size_t length, MemoryKind kind = MemoryKind::kHost);
  // Declares one destination tensor (layout.h builds them). Before connect().
  Status add_tensor(InferenceTensor tensor);

  // Sends the metadata to the controller and waits for this rank's setup (or the controller's
  // error, returned as InvalidArgument with its message).
  Status connect();

  // Calls `callback` once, on the engine's callback thread: Ok when `version` is complete here,
  // else the reason (DeadlineExceeded after `timeout`, Cancelled at shutdown). AlreadyExists if
  // the version is already being waited for.
  Status on_version(uint64_t version, std::chrono::milliseconds timeout, VersionCallback callback);
  // Blocks until on_version's outcome.
  Status wait_for_version(uint64_t version, std::chrono::milliseconds timeout);

  const InferenceSetup& setup() const;  // after connect()
  const InferenceMetadata& metadata() const;

 private:
  struct State;
  explicit InferenceEndpoint(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fabric_lib::weights
