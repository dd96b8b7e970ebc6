// IpcDomain: poll() and the owner's side of the ring — imms and message fragments pushed by
// peers become events; slots claimed by producers that died are skipped; the worker may sleep
// on the wake-up FIFO once nothing is pending.

#include "base/clock.h"
#include "base/log.h"
#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc {
namespace {

constexpr int64_t kSweepIntervalNs = 20'000'000;        // liveness of peers with operations in flight
constexpr int64_t kPartialCheckIntervalNs = 500'000'000; // senders of half-received messages
constexpr int64_t kBlockedSlotCheckNs = 5'000'000;       // a claimed, unpublished slot this old: is its producer alive?
constexpr uint64_t kPollsPerClockRead = 16;               // for the two checks above

bool pid_alive(uint32_t pid) { return process_start_time(pid).ok(); }

}  // namespace

size_t IpcDomain::poll(std::vector<Event>& out, size_t max) {
  if (asked_to_sleep_) {
    segment_->header()->consumer_sleeping.store(0, std::memory_order_relaxed);
    segment_->drain_wakeups();
    asked_to_sleep_ = false;
  }
  const size_t before = out.size();
  ++pass_;
  progress_copies();
  pump_outboxes();
  // The peer sweep and the partial-message check are due every 20 ms / 500 ms: the clock is
  // read for them on every 16th poll only (a profile of a spinning worker on the GPU host put
  // 8-22 % of its samples in clock reads, and a group of 4 domains read it here 4 times a pass).
  const bool timed_work = (ops_.in_use() || assembler_.partial_count()) && pass_ % kPollsPerClockRead == 0;
  const int64_t now = timed_work ? monotonic_ns() : 0;
  if (timed_work && ops_.in_use() && now >= next_sweep_ns_) {
    next_sweep_ns_ = now + kSweepIntervalNs;
    sweep_peers(now);
  }
  if (timed_work && assembler_.partial_count() && now >= next_partial_check_ns_) {
    next_partial_check_ns_ = now + kPartialCheckIntervalNs;
    if (size_t n = assembler_.drop_partial_of(pid_alive)) {
      FL_LOG_WARN("ipc domain {}: dropped {} partly received message(s) of exited senders", segment_->name(), n);
    }
  }
  while (out.size() - before < max && !completed_.empty()) {
    out.push_back(std::move(completed_.front()));
    completed_.pop_front();
  }
  if (out.size() - before < max) consume_ring(out, max - (out.size() - before));
  if (out.size() - before < max) assembler_.deliver(out, max - (out.size() - before));
  release_removed_peers();
  return out.size() - before;
}

size_t IpcDomain::consume_ring(std::vector<Event>& out, size_t max) {
  size_t n = 0;
  Record record;
  while (n < max) {
    if (!assembler_.accepting()) break;  // messages wait for receive buffers: stop reading
    uint32_t claimer = 0;
    switch (consumer_.pop(record, &claimer)) {
      case RingConsumer::Pop::kEmpty:
        return n;
      case RingConsumer::Pop::kBlocked:
        on_blocked_slot(claimer);
        return n;
      case RingConsumer::Pop::kInvalid:
        if (invalid_records_++ % 1024 == 0) FL_LOG_WARN("ipc domain {}: skipped an invalid ring slot", segment_->name());
        continue;
      case RingConsumer::Pop::kRecord:
        break;
    }
    blocked_position_ = UINT64_MAX;
    if (record.header.type == RecordType::kImm) {
      if (!valid_imm_record(record)) {
        if (invalid_records_++ % 1024 == 0) FL_LOG_WARN("ipc domain {}: skipped a malformed imm record", segment_->name());
        continue;
      }
      // One event for the record's arrivals (a run's imms, or equal imms coalesced by the sender).
      Event ev;
      ev.kind = EventKind::kImm;
      ev.imm = record.header.value;
      ev.count = record.header.count;
      out.push_back(ev);
      ++n;
      continue;
    }
    Status s = assembler_.add(record);
    if (!s.ok()) FL_LOG_WARN("ipc domain {}: {}", segment_->name(), s.message());
  }
  return n;
}

void IpcDomain::on_blocked_slot(uint32_t claimer) {
  // Normally a claim is published within nanoseconds; one that stays is a producer that died
  // between claiming and publishing (or one that is paused: then it must be waited for).
  const int64_t now = monotonic_ns();
  if (blocked_position_ != consumer_.position()) {
    blocked_position_ = consumer_.position();
    blocked_since_ns_ = now;
    return;
  }
  if (now - blocked_since_ns_ < kBlockedSlotCheckNs) return;
  blocked_since_ns_ = now;
  if (claimer == self_.pid || pid_alive(claimer)) return;
  if (consumer_.skip_claimed(claimer)) {
    FL_LOG_WARN("ipc domain {}: skipped a ring slot claimed by exited process {}", segment_->name(), claimer);
    blocked_position_ = UINT64_MAX;
  }
}

bool IpcDomain::has_deferred_work() const {
  return host_copies_.inflight() > 0 || (gpu_ && gpu_->copies().inflight() > 0) || outbox_items_ > 0 ||
         !completed_.empty() || assembler_.deliverable();
}

bool IpcDomain::ready_to_block() {
  if (has_deferred_work()) return false;
  SegmentHeader* h = segment_->header();
  h->consumer_sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the producers' fence in wake_owner()
  // While messages wait for receive buffers the ring is not read anyway: posting buffers (through
  // the worker's inbox) wakes the worker.
  if (assembler_.accepting() && consumer_.has_pending()) {
    h->consumer_sleeping.store(0, std::memory_order_relaxed);
    return false;
  }
  asked_to_sleep_ = true;
  return true;
}

}  // namespace fabric_lib::transport::ipc
