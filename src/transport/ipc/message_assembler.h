// The receiving half of SEND/RECV over an ipc ring: message fragments from any number of
// senders are reassembled (per sender and message number), and complete messages are copied into
// the receive buffers the worker posted, in arrival order — application messages into post_recv
// buffers, control messages (liveness probe) into post_control_recv buffers. A message that
// arrives before a buffer is posted waits here; while such waiting messages hold more than
// `max_waiting_bytes`, the domain stops reading its ring (back-pressure on the senders).
//
// Fragments come from other processes: a fragment that does not continue its message exactly
// (wrong offset, length or total) drops that message; a sender that dies mid-message leaves a
// partial message that drop_partial_of() discards.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "transport/domain.h"
#include "transport/ipc/mpsc_ring.h"

namespace fabric_lib::transport::ipc {

// The largest message a sender may announce (as the builder's max_message_bytes).
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 30;

class MessageAssembler {
 public:
  explicit MessageAssembler(uint64_t max_waiting_bytes = 64ull << 20) : max_waiting_(max_waiting_bytes) {}

  void post_recv(bool control, const RecvWr& wr) { (control ? control_bufs_ : app_bufs_).push_back(wr); }
  // Takes one fragment record; an error when it was malformed (and dropped, with its message).
  Status add(const Record& fragment);
  // Copies complete messages into posted buffers; appends at most `max` events.
  size_t deliver(std::vector<Event>& out, size_t max);
  // False while complete messages waiting for buffers exceed the bound.
  bool accepting() const { return waiting_bytes_ < max_waiting_; }
  bool deliverable() const;
  // Discards partial messages whose sender `alive(pid)` says is gone; returns how many.
  size_t drop_partial_of(const std::function<bool(uint32_t pid)>& alive);
  size_t partial_count() const { return partial_.size(); }
  size_t waiting_count() const { return app_ready_.size() + control_ready_.size(); }
  // Receive buffers still posted (the worker's contexts), for closing.
  size_t posted_count() const { return app_bufs_.size() + control_bufs_.size(); }

 private:
  struct Partial {
    uint32_t pid = 0;
    bool control = false;
    uint64_t total = 0;          // the length its first fragment announced
    std::vector<uint8_t> bytes;  // received so far
  };
  // Reserved for a new message up front; longer ones grow as their fragments come.
  static constexpr uint64_t kReserveBytes = 4096;
  using Key = std::pair<uint64_t, uint32_t>;  // sender token, message number

  uint64_t max_waiting_;
  uint64_t waiting_bytes_ = 0;
  std::map<Key, Partial> partial_;
  std::deque<std::vector<uint8_t>> app_ready_, control_ready_;
  std::deque<RecvWr> app_bufs_, control_bufs_;
};

}  // namespace fabric_lib::transport::ipc
