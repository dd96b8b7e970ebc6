// DeadlineQueue<P>: the one timer mechanism of the engine — a min-heap of (when, payload). The
// owner drives it from its own loop: next_ns() says when to wake, pop_due(now, fn) hands over
// every payload whose time has come. Cancellation is lazy: the payload names what it was set for
// (a request id, an expectation generation) and the owner ignores entries whose target moved on,
// so scheduling and cancelling cost O(log n) and O(1) and nothing is searched.
//
// Group workers keep one for request deadlines (on their own thread); the ImmCounter's
// expectation deadlines are kept in one driven by a TimerThread (timer_thread.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

namespace fabric_lib {

template <typename Payload>
class DeadlineQueue {
 public:
  void schedule(int64_t when_ns, Payload payload) { heap_.push(Entry{when_ns, seq_++, std::move(payload)}); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // The earliest deadline, if any.
  std::optional<int64_t> next_ns() const {
    if (heap_.empty()) return std::nullopt;
    return heap_.top().when_ns;
  }
  // Calls fn(payload) for each entry due at `now_ns`, earliest first (ties in scheduling order);
  // returns how many. fn may schedule more.
  template <typename Fn>
  size_t pop_due(int64_t now_ns, Fn&& fn) {
    size_t n = 0;
    while (!heap_.empty() && heap_.top().when_ns <= now_ns) {
      Payload p = std::move(const_cast<Entry&>(heap_.top()).payload);
      heap_.pop();
      fn(std::move(p));
      ++n;
    }
    return n;
  }
  void clear() { heap_ = {}; }

 private:
  struct Entry {
    int64_t when_ns;
    uint64_t seq;
    Payload payload;
    bool operator>(const Entry& o) const { return when_ns != o.when_ns ? when_ns > o.when_ns : seq > o.seq; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  uint64_t seq_ = 0;
};

}  // namespace fabric_lib
