#include "mailbox.h"

#include <unistd.h>

#include <random>
#include <thread>

namespace fabric_lib::weights::detail {
namespace {
uint64_t random_stream() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(::getpid()) << 16) ^
         static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}
}  // namespace

Mailbox::Mailbox(TransferEngine& engine, size_t frame_bytes, Handler handler)
    : engine_(engine), frame_bytes_(frame_bytes), handler_(std::move(handler)), stream_(random_stream()) {}

Result<std::shared_ptr<Mailbox>> Mailbox::create(TransferEngine& engine, size_t frame_bytes, Handler handler) {
  if (frame_bytes <= kFrameHeaderBytes + 64 || frame_bytes > (1u << 30)) return invalid_argument("mailbox: bad frame size");
  std::shared_ptr<Mailbox> m(new Mailbox(engine, frame_bytes, std::move(handler)));
  std::weak_ptr<Mailbox> weak = m;
  Status st = engine.post_recvs(kRecvBuffers, frame_bytes, [weak](std::span<const uint8_t> f) {
    if (std::shared_ptr<Mailbox> self = weak.lock()) self->on_frame(f);
  });
  if (!st.ok()) return st;
  return m;
}

void Mailbox::on_frame(std::span<const uint8_t> frame) {
  std::optional<std::vector<uint8_t>> message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Result<std::optional<std::vector<uint8_t>>> r = reassembler_.add(frame);
    if (!r.ok()) {
      ++malformed_;
      return;
    }
    message = std::move(*r);
  }
  if (message) handler_(std::move(*message));
}

uint64_t Mailbox::malformed_frames() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return malformed_;
}

Status Mailbox::send(const DomainAddress& dst, std::span<const uint8_t> message, Clock::time_point deadline) {
  uint32_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
  }
  const std::vector<std::vector<uint8_t>> frames = frame_message(message, stream_, id, frame_bytes_);
  CompletionCounter counter;
  uint64_t submitted = 0;
  for (const std::vector<uint8_t>& f : frames) {
    while (submitted - counter.finished() >= kWindow) {
      if (Clock::now() > deadline) return Status(ErrorCode::kDeadlineExceeded, "mailbox: sending timed out");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      counter.wait_for(counter.finished() + 1, std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(100))));
    }
    if (counter.errors.load() > 0) break;
    Result<TransferId> id_or = engine_.submit_send(dst, f, Completion::counter(counter).with_deadline(deadline));
    if (!id_or.ok()) return id_or.status();
    ++submitted;
  }
  while (counter.finished() < submitted) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && counter.finished() < submitted) break;
    counter.wait_for(submitted, std::max(std::chrono::milliseconds(1), left));
  }
  // Completions carry the deadline, so they all come; wait for the stragglers before the
  // counter goes out of scope.
  while (counter.finished() < submitted) counter.wait_for(submitted, std::chrono::milliseconds(100));
  if (counter.errors.load() > 0) return Status(ErrorCode::kPeerUnreachable, "mailbox: a frame could not be sent to " + dst.to_hex().substr(0, 16) + "...");
  return ok_status();
}

}  // namespace fabric_lib::weights::detail
