// GroupWorker: taking over from a worker thread stuck inside a provider call (provider_watchdog.h).
#include "core/group_worker.h"
#include "base/log.h"

namespace fabric_lib::detail {

void GroupWorker::take_over_stuck(const Status& why) {
  // The worker thread is frozen at a provider-call boundary (ProviderCallGuard): its requests,
  // receive pools and queues are consistent and no longer change under us.
  abandon_reason_ = why;
  abandoned_.store(true, std::memory_order_seq_cst);
  FL_LOG_ERROR("group {}: {}", config_.group, why.to_string());
  for_each_live([&](Request* r) {
    if (!r->delivered) deliver(r, why, /*on_owner=*/false);
  });
  for (const auto& pool : recv_pools_) {
    if (pool->on_error) dispatcher_.post([pool, why] { pool->on_error(why); });
  }
  inbox_->close_and_refuse();
  fail_orphans();
}

void GroupWorker::fail_orphans() {
  Request* batch[64];
  size_t n;
  while ((n = inbox_->pop_requests(batch, 64)) > 0) {
    for (size_t i = 0; i < n; ++i) {
      deliver(batch[i], abandon_reason_, /*on_owner=*/false);
      config_.requests->release(batch[i]);
    }
  }
}

}  // namespace fabric_lib::detail
