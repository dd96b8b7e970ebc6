// The KV-transfer control messages, carried over the engine's SEND/RECV, and their versioned
// codec. decode_message() validates every field (the bytes come from the network, and the tests
// fuzz it): it accepts exactly what encode_message() produces and returns Malformed otherwise.
//
// Wire format, version 1 (little endian):
//   header:  "FLKV" | u8 version | u8 type | u8 role | u8 reserved (0) | u64 incarnation |
//            u16 sender length | sender address bytes
//   dispatch: str request_id | layout (u8 kind, u8 dtype, u16 0, u32 layers, u32 page_tokens,
//            u32 head_dim, u32 kv_heads, u64 fingerprint) | u32 decode rank | u32 decode tp |
//            u8 decode packing | u32 prefill rank | u32 prefill tp | u16 domains | u32 tokens |
//            u32 first_page | u32 imm | u32 timeout_ms | u16 regions, each u32 length + MrDesc |
//            u64 page_stride | u32 num_pages | per layer (u16 region, u64 offset) for K, then for
//            V when separate GQA | u32 pages, each u32 | u8 has_tail [u16 region, u64 offset,
//            u64 length]
//   cancel:   str request_id | u32 imm | u32 timeout_ms
//   confirm:  str request_id | u32 imm | u8 outcome | u64 writes_completed
//   reject:   str request_id | u32 imm | u8 error code | u8 after_writes | str reason
//   heartbeat: u32 active requests
// where str = u16 length + bytes. Nothing may follow the last field.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "fabric_lib/kv/layout.h"
#include "fabric_lib/kv/plan.h"

namespace fabric_lib::kv {

inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxReasonBytes = 1024;
inline constexpr size_t kMaxRegions = 16;
inline constexpr size_t kMaxPagesPerRequest = 1u << 22;
inline constexpr uint64_t kMaxTailBytes = 1ull << 30;

enum class MessageType : uint8_t { kDispatch = 1, kCancel = 2, kCancelConfirm = 3, kReject = 4, kHeartbeat = 5 };
enum class Role : uint8_t { kDecoder = 1, kPrefiller = 2 };

struct MessageHeader {
  MessageType type = MessageType::kHeartbeat;
  Role role = Role::kDecoder;
  uint64_t incarnation = 0;  // random per Decoder/Prefiller object: a restarted peer is a new one
  DomainAddress sender;      // the sender engine's main address: where replies go
};

// Decoder -> prefill rank: write this request's pages (and maybe its tail) into my memory.
struct DispatchMessage {
  std::string request_id;
  KvLayout layout;
  uint64_t fingerprint = 0;  // layout.fingerprint(); checked on decode
  RankShape decoder;         // the destination rank
  uint32_t prefill_rank = 0;
  uint32_t prefill_tp = 1;
  uint16_t domains = 1;      // the decoder's domains per group
  uint32_t num_tokens = 0;   // the request's prompt tokens
  uint32_t first_page = 0;   // pages [0, first_page) are already on the decoder (prefix reuse)
  std::vector<uint32_t> dst_pages;  // destination page of request pages first_page, first_page + 1, ...
  uint32_t imm = 0;
  uint32_t timeout_ms = 0;   // time left until the decoder gives up (relative: clocks differ)
  std::vector<MrDesc> regions;
  KvMemoryLayout memory;     // the decoder rank's cache in `regions`
  bool has_tail = false;
  uint16_t tail_region = 0;
  uint64_t tail_offset = 0;
  uint64_t tail_length = 0;
};

// Decoder -> prefill rank: stop writing the request, confirm once no write of it is in flight.
struct CancelMessage {
  std::string request_id;
  uint32_t imm = 0;
  uint32_t timeout_ms = 0;  // how long the prefiller remembers the cancellation (a late dispatch)
};

enum class CancelOutcome : uint8_t {
  kStopped = 1,     // writes were stopped; every posted one has completed
  kUnknown = 2,     // no such dispatch: it will be refused if it still arrives
  kFinished = 3,    // it had already ended (all writes completed, or failed)
};

// Prefill rank -> decoder: no write of this request is in flight or will be posted.
struct CancelConfirmMessage {
  std::string request_id;
  uint32_t imm = 0;
  CancelOutcome outcome = CancelOutcome::kStopped;
  uint64_t writes_completed = 0;  // paged-write and tail requests that completed for it
};

// Prefill rank -> decoder: the request failed on the prefill side. after_writes = false: the
// dispatch was refused before anything was posted; true: it was aborted and every posted write
// has completed. Either way nothing more will be written.
struct RejectMessage {
  std::string request_id;
  uint32_t imm = 0;
  ErrorCode code = ErrorCode::kInvalidArgument;
  bool after_writes = false;
  std::string reason;
};

// Either way, to every peer with requests in common, every heartbeat interval.
struct HeartbeatMessage {
  uint32_t active = 0;
};

using MessageBody = std::variant<DispatchMessage, CancelMessage, CancelConfirmMessage, RejectMessage, HeartbeatMessage>;

struct Message {
  MessageHeader header;
  MessageBody body;
};

MessageType type_of(const MessageBody& body);
std::string_view message_type_name(MessageType type);

std::vector<uint8_t> encode_message(const Message& message);
// Malformed for anything encode_message() would not produce; its message names the field.
Result<Message> decode_message(std::span<const uint8_t> bytes);
// Only the header (for logging who sent a message whose body does not decode, and for replying
// to a dispatch of an unsupported version). Malformed when even the header is bad.
Result<MessageHeader> decode_header(std::span<const uint8_t> bytes, uint8_t* version = nullptr);

}  // namespace fabric_lib::kv
