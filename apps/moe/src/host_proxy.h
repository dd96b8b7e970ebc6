// HostProxy: the thread (one per rank, optionally pinned) that turns the halves' progress words
// into engine transfers — the paper's host proxy (§6.1). Per step t:
//   routes ready   -> scatter this rank's count block to every peer (prepared PeerGroup scatter,
//                     imm base+0), copy it into its own slot
//   send ready     -> speculative private writes: min(n, P) pairs into each peer's slot for this
//                     rank (one target per peer, imm base+1), before any route has arrived
//   routes arrived -> (repeating expectation, W-1 per step) validate every block, plan, publish
//                     the receive plan, then the overflow writes (D targets per peer, imm base+1)
//   tokens arrived -> (expectation (W-1)(1+D) per step) the engine sets the word the receive half
//                     waits on
//   combine ready  -> one combine scatter (D targets per peer, imm base+2)
//   writes done    -> the send regions are free for step t+1
// Every target is written every step, zero-length when it has nothing, so each expectation's n
// is a constant and one repeating expectation serves the whole step stream.
//
// Failure: an engine error, a malformed block, an overflow past capacity, or a peer that has not
// delivered within step_timeout of this rank's own post sets the abort word (kernels and CPU
// halves stop waiting) and records the Status; the proxy then does nothing more.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric_lib/moe/all_to_all.h"
#include "fabric_lib/moe/routing.h"
#include "fabric_lib/moe/wire.h"
#include "fabric_lib/transfer_engine.h"
#include "rank_state.h"

namespace fabric_lib::moe::detail {

struct ProxySetup {
  TransferEngine* engine = nullptr;
  RankState* state = nullptr;
  std::vector<RankInfo> infos;  // all ranks, by rank
  MrHandle route_send_mr, dispatch_send_mr, combine_send_mr;
};

class HostProxy {
 public:
  // Prepares the scatters and expectations and starts the thread.
  static Result<std::unique_ptr<HostProxy>> start(ProxySetup setup);
  ~HostProxy();  // stop()

  // Ends the thread (the rank keeps its failure state). Idempotent.
  void stop();
  std::vector<ProxyStepTimes> take_step_times();

 private:
  explicit HostProxy(ProxySetup setup);
  Status prepare();
  void run();
  // One pass over the step's conditions; true when something happened.
  bool advance();
  Status post_routes();
  Status post_private();
  Status plan_routes();
  Status post_overflow();
  Status post_combine();
  bool check_deadlines();
  std::string describe() const;  // the words and counts, for error messages
  Completion write_completion(bool dispatch, const char* what);
  RepeatingSink round_sink(uint32_t word);
  void finish_step();

  // What the engine's callbacks may touch: cleared by stop(), so callbacks that run late (a
  // write that ends after a failure, an expectation's end) never reach freed memory.
  struct SinkGuard {
    std::mutex mu;
    RankState* state = nullptr;
    std::atomic<uint64_t> dispatch_done{0}, combine_done{0};  // completed writes, all steps
  };

  ProxySetup s_;
  RankState& st_;
  const Geometry g_;
  std::shared_ptr<SinkGuard> sinks_;
  uint32_t domains_ = 1;
  std::vector<uint32_t> peers_;  // ranks other than this one, ascending
  PeerGroup route_group_, dispatch_group_, combine_group_;
  PreparedScatter route_scatter_, private_scatter_, overflow_scatter_, combine_scatter_;
  uint32_t imm_route_ = 0, imm_dispatch_ = 0, imm_combine_ = 0;

  // The step in progress.
  struct Step {
    uint64_t t = 1;
    bool routes_posted = false, private_posted = false, planned = false, overflow_posted = false;
    bool combine_posted = false, dispatch_freed = false, combine_freed = false;
    Clock::time_point routes_at{}, overflow_at{}, combine_at{};
    std::vector<uint32_t> own_counts;
    StepPlan plan;
    ProxyStepTimes times;
  } step_;
  std::vector<uint8_t> blocks_;  // the W blocks of the step, copied before validation
  uint64_t dispatch_submitted_ = 0, combine_submitted_ = 0;  // writes submitted, all steps

  std::mutex times_mu_;
  std::vector<ProxyStepTimes> times_;
  std::atomic<bool> running_{true};
  // Set by the thread as it leaves run(); shared, so the thread never touches a freed proxy.
  struct Exit {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  std::shared_ptr<Exit> exit_ = std::make_shared<Exit>();
  std::thread thread_;
  void join_thread();
};

}  // namespace fabric_lib::moe::detail
