#include "fabric_lib/weights/codec.h"
#include "wire.h"

namespace fabric_lib::weights {
namespace {
constexpr uint8_t kFrameMagic[4] = {'F', 'L', 'W', 'F'};
}

std::vector<std::vector<uint8_t>> frame_message(std::span<const uint8_t> message, uint64_t stream, uint32_t message_id,
                                                size_t max_frame_bytes) {
  const size_t chunk = max_frame_bytes > kFrameHeaderBytes ? max_frame_bytes - kFrameHeaderBytes : 1;
  const size_t count = message.empty() ? 1 : (message.size() + chunk - 1) / chunk;
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    wire::Writer w;
    w.bytes(kFrameMagic);
    w.u8(kWeightsFormatVersion);
    w.u8(0);
    w.u64(stream);
    w.u32(message_id);
    w.u32(static_cast<uint32_t>(i));
    w.u32(static_cast<uint32_t>(count));
    w.u32(static_cast<uint32_t>(chunk));
    w.u32(static_cast<uint32_t>(message.size()));
    const size_t begin = i * chunk, end = std::min(message.size(), begin + chunk);
    w.bytes(message.subspan(begin, end - begin));
    frames.push_back(w.take());
  }
  return frames;
}

Result<std::optional<std::vector<uint8_t>>> Reassembler::add(std::span<const uint8_t> frame) {
  wire::Reader r(frame);
  uint8_t magic[4], version, reserved;
  uint64_t stream;
  uint32_t id, index, count, chunk, total;
  for (uint8_t& b : magic) {
    if (!r.u8(b)) return malformed("weights frame: truncated header");
  }
  if (std::memcmp(magic, kFrameMagic, 4) != 0) return malformed("weights frame: bad magic");
  if (!r.u8(version) || version != kWeightsFormatVersion || !r.u8(reserved)) return malformed("weights frame: unsupported version");
  if (!(r.u64(stream) && r.u32(id) && r.u32(index) && r.u32(count) && r.u32(chunk) && r.u32(total))) {
    return malformed("weights frame: truncated header");
  }
  if (chunk == 0 || total > kMaxMessageBytes || count != (total == 0 ? 1 : (static_cast<uint64_t>(total) + chunk - 1) / chunk) ||
      index >= count) {
    return malformed("weights frame: inconsistent chunking");
  }
  const uint64_t begin = static_cast<uint64_t>(index) * chunk;
  const uint64_t len = std::min<uint64_t>(chunk, total - begin);
  if (r.remaining() != len) return malformed("weights frame: payload length does not match its chunk");
  const uint8_t* payload = frame.data() + (frame.size() - len);
  if (count == 1) return std::optional<std::vector<uint8_t>>(std::vector<uint8_t>(payload, payload + len));

  const auto key = std::make_pair(stream, id);
  auto it = partial_.find(key);
  if (it == partial_.end()) {
    if (pending_bytes_ + total > max_pending_) return Status(ErrorCode::kResourceExhausted, "weights frame: too many bytes in incomplete messages");
    Partial p;
    p.count = count;
    p.chunk = chunk;
    p.total = total;
    p.data.resize(total);
    p.have.assign(count, false);
    pending_bytes_ += total;
    it = partial_.emplace(key, std::move(p)).first;
  }
  Partial& p = it->second;
  auto drop = [&](const char* why) -> Status {
    pending_bytes_ -= p.total;
    partial_.erase(it);
    return malformed(std::string("weights frame: ") + why);
  };
  if (p.count != count || p.chunk != chunk || p.total != total) return drop("chunking differs from earlier frames of the message");
  if (p.have[index]) return drop("duplicate frame");
  p.have[index] = true;
  std::memcpy(p.data.data() + begin, payload, len);
  if (++p.received < p.count) return std::optional<std::vector<uint8_t>>();
  std::vector<uint8_t> out = std::move(p.data);
  pending_bytes_ -= p.total;
  partial_.erase(it);
  return std::optional<std::vector<uint8_t>>(std::move(out));
}

}  // namespace fabric_lib::weights
