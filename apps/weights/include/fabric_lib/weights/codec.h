// Wire formats of the weights app's control messages (they travel over SEND/RECV between the
// controller, trainers and inference ranks). Every decoder validates every field (counts, lengths,
// enum values, box bounds, offsets) and returns Malformed on anything else: the bytes come from
// the network. Fuzzed by apps/weights/tests/fuzz/.
//
// A message = "FLWM" | u8 format version (kWeightsFormatVersion) | u8 kind | payload (little endian).
// Messages longer than one SEND are cut into frames (frame_message) and put back together by a
// Reassembler, which accepts frames in any order (the transport is unordered).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric_lib/weights/plan.h"
#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

inline constexpr uint8_t kWeightsFormatVersion = 1;

// Values pinned: on the wire.
enum class MessageKind : uint8_t {
  kTrainerHello = 1,      // TrainerMetadata
  kInferenceHello = 2,    // InferenceMetadata
  kTrainerSetup = 3,      // TrainerSetup
  kInferenceSetup = 4,    // InferenceSetup
  kTrainerReady = 5,      // TrainerReady
  kPeers = 6,             // Peers
  kPlanError = 7,         // PlanError
};

// The controller's answer to a trainer: its part of the schedule and the descriptors it needs.
struct TrainerSetup {
  uint32_t trainers = 0, inference = 0, domains = 1;
  std::vector<std::string> group_names;
  uint64_t fingerprint = 0;
  TrainerPlan plan;
  std::vector<MrDesc> target_descs;       // per plan.targets entry; empty for staging targets (see Peers)
  std::vector<MrDesc> inference_barrier;  // by inference rank: where the end-of-step imm goes
  friend bool operator==(const TrainerSetup&, const TrainerSetup&) = default;
};

struct InferenceSetup {
  uint32_t trainers = 0;
  uint64_t fingerprint = 0;
  InferencePlan plan;
  friend bool operator==(const InferenceSetup&, const InferenceSetup&) = default;
};

// A trainer has registered its staging buffer (which also receives barrier imms).
struct TrainerReady {
  uint32_t rank = 0;
  MrDesc staging;
  friend bool operator==(const TrainerReady&, const TrainerReady&) = default;
};

// Every trainer's staging descriptor, by rank: the last setup message.
struct Peers {
  std::vector<MrDesc> trainer_staging;
  friend bool operator==(const Peers&, const Peers&) = default;
};

struct PlanError {
  std::string message;
  friend bool operator==(const PlanError&, const PlanError&) = default;
};

std::vector<uint8_t> encode(const TrainerMetadata& m);
std::vector<uint8_t> encode(const InferenceMetadata& m);
std::vector<uint8_t> encode(const TrainerSetup& m);
std::vector<uint8_t> encode(const InferenceSetup& m);
std::vector<uint8_t> encode(const TrainerReady& m);
std::vector<uint8_t> encode(const Peers& m);
std::vector<uint8_t> encode(const PlanError& m);

// The kind of an encoded message (Malformed when the header is wrong).
Result<MessageKind> message_kind(std::span<const uint8_t> bytes);
Result<TrainerMetadata> decode_trainer_metadata(std::span<const uint8_t> bytes);
Result<InferenceMetadata> decode_inference_metadata(std::span<const uint8_t> bytes);
Result<TrainerSetup> decode_trainer_setup(std::span<const uint8_t> bytes);
Result<InferenceSetup> decode_inference_setup(std::span<const uint8_t> bytes);
Result<TrainerReady> decode_trainer_ready(std::span<const uint8_t> bytes);
Result<Peers> decode_peers(std::span<const uint8_t> bytes);
Result<PlanError> decode_plan_error(std::span<const uint8_t> bytes);

// The canonical bytes of a plan (what fingerprint() hashes).
void append_plan(std::vector<uint8_t>& out, const TrainerPlan& p);

// --- framing ----------------------------------------------------------------------------------

// Frame = "FLWF" | u8 version | u8 reserved | u64 stream | u32 message id | u32 chunk index |
//         u32 chunk count | u32 chunk size | u32 total length | payload chunk.
inline constexpr size_t kFrameHeaderBytes = 34;
// Largest message a Reassembler accepts.
inline constexpr uint64_t kMaxMessageBytes = 1ull << 30;

// Cuts `message` into frames of at most `max_frame_bytes` (> kFrameHeaderBytes) each. `stream`
// names the sender (any value unique per sending process), `message_id` the message within it.
std::vector<std::vector<uint8_t>> frame_message(std::span<const uint8_t> message, uint64_t stream, uint32_t message_id,
                                                size_t max_frame_bytes);

// Collects frames into messages. Not thread-safe (one per receiving callback thread).
class Reassembler {
 public:
  // `max_pending_bytes` bounds the memory held by incomplete messages.
  explicit Reassembler(uint64_t max_pending_bytes = 2ull << 30) : max_pending_(max_pending_bytes) {}
  // A complete message once its last frame arrives, nullopt before, Malformed for a bad frame
  // (the partial message it belonged to is dropped).
  Result<std::optional<std::vector<uint8_t>>> add(std::span<const uint8_t> frame);
  size_t pending() const { return partial_.size(); }

 private:
  struct Partial {
    uint32_t count = 0, chunk = 0, total = 0, received = 0;
    std::vector<uint8_t> data;
    std::vector<bool> have;
  };
  uint64_t max_pending_;
  uint64_t pending_bytes_ = 0;
  std::map<std::pair<uint64_t, uint32_t>, Partial> partial_;
};

}  // namespace fabric_lib::weights
