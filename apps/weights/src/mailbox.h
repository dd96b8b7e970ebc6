// Control messages of the weights app over an engine's SEND/RECV (internal): frames outgoing
// messages (codec.h) and sends them with a bounded window, and reassembles incoming frames
// into messages handed to one handler on the engine's callback thread.
//
// A Mailbox takes over the engine's receive path (post_recvs): one per engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/codec.h"

namespace fabric_lib::weights::detail {

class Mailbox {
 public:
  using Handler = std::function<void(std::vector<uint8_t> message)>;

  // `frame_bytes` must not exceed the engine's max_message_bytes (64 KiB by default).
  // The engine keeps calling into the mailbox after it is gone (receives cannot be withdrawn),
  // so it lives in a shared_ptr and the receive callback holds only a weak one; handlers should
  // likewise hold their owner weakly.
  static Result<std::shared_ptr<Mailbox>> create(TransferEngine& engine, size_t frame_bytes, Handler handler);

  // Sends `message` to the engine at `dst`, frame by frame, at most kWindow frames in flight.
  // Blocks until every frame completed or `deadline`. Never call it on the engine's callback thread.
  Status send(const DomainAddress& dst, std::span<const uint8_t> message, Clock::time_point deadline);

  uint64_t malformed_frames() const;

  static constexpr size_t kWindow = 16;
  static constexpr size_t kRecvBuffers = 64;

 private:
  Mailbox(TransferEngine& engine, size_t frame_bytes, Handler handler);
  void on_frame(std::span<const uint8_t> frame);

  TransferEngine& engine_;
  const size_t frame_bytes_;
  Handler handler_;
  const uint64_t stream_;
  std::mutex mu_;  // guards the reassembler, the message id and the counters
  Reassembler reassembler_;
  uint32_t next_id_ = 1;
  uint64_t malformed_ = 0;
};


// What every endpoint (trainer, inference) does when it is created: fills the rank, world,
// address and domain count its metadata carries, and opens its mailbox, whose messages reach
// `st->on_message` for as long as the state lives (the mailbox holds it weakly).
template <typename State>
Status open_endpoint(const std::shared_ptr<State>& st, TransferEngine& engine) {
  st->metadata.rank = st->options.rank;
  st->metadata.world = st->options.world;
  st->metadata.address = engine.main_address();
  st->metadata.domains = static_cast<uint32_t>(engine.num_domains());
  std::weak_ptr<State> weak = st;
  Result<std::shared_ptr<Mailbox>> mb = Mailbox::create(engine, st->options.frame_bytes, [weak](std::vector<uint8_t> m) {
    if (auto s = weak.lock()) s->on_message(std::move(m));
  });
  if (!mb.ok()) return mb.status();
  st->mailbox = std::move(*mb);
  return ok_status();
}

}  // namespace fabric_lib::weights::detail
