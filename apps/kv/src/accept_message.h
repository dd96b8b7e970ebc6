// The first steps both roles take with a control message's bytes: decode them, count the
// message, and drop (counting, and logging the first few) one that does not decode or that comes
// from a peer of the wrong role. Decoder and Prefiller keep their own statistics types; both have
// these three counters.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common.h"
#include "fabric_lib/kv/messages.h"
#include "log.h"

namespace fabric_lib::kv {

template <typename Stats>
std::optional<Message> accept_message(std::span<const uint8_t> bytes, Role from_role, Stats& counters, const char* who) {
  Result<Message> m = decode_message(bytes);
  counters.messages_received++;
  if (!m.ok()) {
    const uint64_t n = ++counters.malformed_messages;
    if (should_log_nth(n)) {
      KV_LOG(kWarn, "%s: dropped a malformed message (%llu so far): %s", who, static_cast<unsigned long long>(n),
             m.status().message().c_str());
    }
    return std::nullopt;
  }
  if (m->header.role != from_role) {
    const uint64_t n = ++counters.unexpected_messages;
    if (should_log_nth(n)) {
      KV_LOG(kWarn, "%s: dropped a %s from a peer of the wrong role", who,
             std::string(message_type_name(m->header.type)).c_str());
    }
    return std::nullopt;
  }
  return std::move(m).value();
}

}  // namespace fabric_lib::kv
