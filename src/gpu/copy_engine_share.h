// One CopyEngine shared by several clients — the ipc domains of one group, which one thread at a
// time drives — so that what they post in a pass is issued together: the first client's
// progress() flushes every client's pending copies (one page-copy launch for the whole pass
// instead of one per domain; contiguous copies of a sharded write can merge), and each client's
// progress() then reports only its own completions.
//
// Each client sees a CopyEngine of its own (client()): its ops travel tagged with the client's
// index in their top 16 bits (the caller's ids must fit in 48), its inflight() counts its own
// copies, and its drain() waits for its own copies (others keep theirs). The share lives as long
// as its last client. Not thread-safe, like every CopyEngine: one thread at a time.
//
// One engine progress per pass, not one per client: a client's progress() runs the engine only
// when copies were submitted since the engine last ran (they must be issued), or when no other
// client ran it since this client's previous progress() (else what finished since is already
// sorted into its queue, and the engine would only be asked again microseconds later — on an
// H200 one event query per stream with copies in flight), and never when nothing is in flight.
// A client polled alone runs it every time, so nothing waits on another client being polled.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/copy_engine.h"

namespace fabric_lib::gpu {

class CopyEngineShare : public std::enable_shared_from_this<CopyEngineShare> {
 public:
  static constexpr int kOpBits = 48;
  static constexpr uint64_t kOpMask = (uint64_t{1} << kOpBits) - 1;

  explicit CopyEngineShare(std::unique_ptr<CopyEngine> engine) : engine_(std::move(engine)) {}
  // A new client's view of the engine; the view keeps the share alive.
  std::unique_ptr<CopyEngine> client();
  CopyEngine& engine() { return *engine_; }
  size_t clients() const { return done_.size(); }

 private:
  class Client;
  // Runs the engine's progress once and sorts what finished into the clients' queues.
  void pump();
  // Whether `client`'s progress() must run the engine (the rule above).
  bool must_pump_for(uint64_t client) const;

  std::unique_ptr<CopyEngine> engine_;
  std::vector<std::vector<CopyDone>> done_;  // per client: finished, not yet reported
  std::vector<size_t> inflight_;            // per client: accepted, not yet reported
  std::vector<uint64_t> pumps_seen_;        // per client: pumps_ at its previous progress()
  uint64_t pumps_ = 0;                      // how often the engine's progress ran
  uint64_t submits_since_pump_ = 0;
  std::vector<CopyDone> scratch_;
};

}  // namespace fabric_lib::gpu
