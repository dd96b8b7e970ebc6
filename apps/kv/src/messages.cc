#include "fabric_lib/kv/messages.h"

#include <algorithm>

#include "wire.h"

namespace fabric_lib::kv {

namespace {

constexpr uint8_t kMagic[4] = {'F', 'L', 'K', 'V'};

void encode_header(wire::Writer& w, const MessageHeader& h, MessageType type) {
  w.bytes(kMagic);
  w.u8(kWireVersion);
  w.u8(static_cast<uint8_t>(type));
  w.u8(static_cast<uint8_t>(h.role));
  w.u8(0);
  w.u64(h.incarnation);
  w.u16(static_cast<uint16_t>(h.sender.bytes().size()));
  w.bytes(h.sender.bytes());
}

void encode_body(wire::Writer& w, const DispatchMessage& m) {
  w.str(m.request_id);
  w.u8(static_cast<uint8_t>(m.layout.kind));
  w.u8(static_cast<uint8_t>(m.layout.dtype));
  w.u16(0);
  w.u32(m.layout.num_layers);
  w.u32(m.layout.page_tokens);
  w.u32(m.layout.head_dim);
  w.u32(m.layout.kv_heads);
  w.u64(m.fingerprint);
  w.u32(m.decoder.tp_rank);
  w.u32(m.decoder.tp_size);
  w.u8(static_cast<uint8_t>(m.decoder.packing));
  w.u32(m.prefill_rank);
  w.u32(m.prefill_tp);
  w.u16(m.domains);
  w.u32(m.num_tokens);
  w.u32(m.first_page);
  w.u32(m.imm);
  w.u32(m.timeout_ms);
  w.u16(static_cast<uint16_t>(m.regions.size()));
  for (const MrDesc& d : m.regions) {
    std::vector<uint8_t> b = d.to_bytes();
    w.u32(static_cast<uint32_t>(b.size()));
    w.bytes(b);
  }
  w.u64(m.memory.page_stride);
  w.u32(m.memory.num_pages);
  for (const auto* list : {&m.memory.k, &m.memory.v}) {
    for (const KvBufferRef& r : *list) {
      w.u16(r.region);
      w.u64(r.offset);
    }
  }
  w.u32(static_cast<uint32_t>(m.dst_pages.size()));
  for (uint32_t p : m.dst_pages) w.u32(p);
  w.u8(m.has_tail ? 1 : 0);
  if (m.has_tail) {
    w.u16(m.tail_region);
    w.u64(m.tail_offset);
    w.u64(m.tail_length);
  }
}

void encode_body(wire::Writer& w, const CancelMessage& m) {
  w.str(m.request_id);
  w.u32(m.imm);
  w.u32(m.timeout_ms);
}
void encode_body(wire::Writer& w, const CancelConfirmMessage& m) {
  w.str(m.request_id);
  w.u32(m.imm);
  w.u8(static_cast<uint8_t>(m.outcome));
  w.u64(m.writes_completed);
}
void encode_body(wire::Writer& w, const RejectMessage& m) {
  w.str(m.request_id);
  w.u32(m.imm);
  w.u8(static_cast<uint8_t>(m.code));
  w.u8(m.after_writes ? 1 : 0);
  w.str(m.reason);
}
void encode_body(wire::Writer& w, const HeartbeatMessage& m) { w.u32(m.active); }

Status bad(const std::string& what) { return malformed("kv message: " + what); }

Status decode_dispatch(wire::Reader& r, DispatchMessage& m) {
  uint8_t kind = 0, dtype = 0, packing = 0, has_tail = 0;
  uint16_t reserved = 1, regions = 0;
  if (!r.str(m.request_id, kMaxRequestIdBytes, "request_id") || !r.u8(kind, "layout.kind") || !r.u8(dtype, "layout.dtype") ||
      !r.u16(reserved, "layout.reserved") || !r.u32(m.layout.num_layers, "layout.num_layers") ||
      !r.u32(m.layout.page_tokens, "layout.page_tokens") || !r.u32(m.layout.head_dim, "layout.head_dim") ||
      !r.u32(m.layout.kv_heads, "layout.kv_heads") || !r.u64(m.fingerprint, "fingerprint") ||
      !r.u32(m.decoder.tp_rank, "decode rank") || !r.u32(m.decoder.tp_size, "decode tp") ||
      !r.u8(packing, "decode packing") || !r.u32(m.prefill_rank, "prefill rank") || !r.u32(m.prefill_tp, "prefill tp") ||
      !r.u16(m.domains, "domains") || !r.u32(m.num_tokens, "num_tokens") || !r.u32(m.first_page, "first_page") ||
      !r.u32(m.imm, "imm") || !r.u32(m.timeout_ms, "timeout_ms") || !r.u16(regions, "region count")) {
    return bad("truncated at " + r.error());
  }
  if (reserved != 0) return bad("layout.reserved is not 0");
  m.layout.kind = static_cast<AttentionKind>(kind);
  m.layout.dtype = static_cast<DType>(dtype);
  if (Status s = m.layout.validate(); !s.ok()) return bad(s.message());
  if (m.fingerprint != m.layout.fingerprint()) return bad("layout fingerprint does not match its fields");
  m.decoder.packing = static_cast<KvPacking>(packing);
  auto plan = plan_pair(m.layout, {m.prefill_rank, m.prefill_tp, KvPacking::kSeparate}, m.decoder);
  if (!plan.ok()) return bad(plan.status().message());
  if (plan->empty()) return bad("the prefill rank supplies nothing to this decode rank");
  if (m.domains < 1 || m.domains > kMaxDomainsPerGroup) return bad("domains must be 1..16");
  if (m.num_tokens == 0) return bad("num_tokens is 0");
  if (m.timeout_ms == 0) return bad("timeout_ms is 0");
  if (regions < 1 || regions > kMaxRegions) return bad("region count must be 1..16");
  std::vector<uint64_t> lengths;
  for (uint16_t i = 0; i < regions; ++i) {
    uint32_t len = 0;
    std::span<const uint8_t> b;
    if (!r.u32(len, "region length") || !r.bytes(len, b, "region")) return bad("truncated at " + r.error());
    auto desc = MrDesc::from_bytes(b);
    if (!desc.ok()) return bad("region " + std::to_string(i) + ": " + desc.status().message());
    if (!has_access(desc->access(), Access::kRemoteWrite)) return bad("region " + std::to_string(i) + " is not writable");
    lengths.push_back(desc->length());
    m.regions.push_back(*std::move(desc));
  }
  if (!r.u64(m.memory.page_stride, "page_stride") || !r.u32(m.memory.num_pages, "num_pages"))
    return bad("truncated at " + r.error());
  const bool two = m.layout.kind == AttentionKind::kGqa && m.decoder.packing == KvPacking::kSeparate;
  m.memory.packing = m.decoder.packing;
  for (auto* list : {&m.memory.k, &m.memory.v}) {
    if (list == &m.memory.v && !two) break;
    list->resize(m.layout.num_layers);
    for (KvBufferRef& ref : *list) {
      if (!r.u16(ref.region, "buffer region") || !r.u64(ref.offset, "buffer offset")) return bad("truncated at " + r.error());
    }
  }
  if (Status s = m.memory.validate(m.layout, m.decoder.tp_size, lengths); !s.ok()) return bad(s.message());
  uint32_t pages = 0;
  if (!r.u32(pages, "page count")) return bad("truncated at " + r.error());
  const uint32_t total = pages_for_tokens(m.num_tokens, m.layout.page_tokens);
  if (m.first_page > total) return bad("first_page is past the request's pages");
  if (pages != total - m.first_page) return bad("page count does not match num_tokens and first_page");
  if (pages > kMaxPagesPerRequest || pages > r.remaining() / 4) return bad("page list too long");
  m.dst_pages.resize(pages);
  for (uint32_t& p : m.dst_pages) {
    if (!r.u32(p, "page")) return bad("truncated at " + r.error());
    if (p >= m.memory.num_pages) return bad("page index " + std::to_string(p) + " outside the cache");
  }
  std::vector<uint32_t> sorted = m.dst_pages;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return bad("a destination page repeats");
  if (!r.u8(has_tail, "has_tail") || has_tail > 1) return bad("has_tail must be 0 or 1");
  m.has_tail = has_tail == 1;
  if (m.has_tail && !plan->sends_tail) return bad("a tail for a prefill rank that does not send this rank's tail");
  if (!m.has_tail && (plan->segments.empty() || m.dst_pages.empty())) return bad("the dispatch asks for nothing");
  if (m.has_tail) {
    if (!r.u16(m.tail_region, "tail region") || !r.u64(m.tail_offset, "tail offset") || !r.u64(m.tail_length, "tail length"))
      return bad("truncated at " + r.error());
    if (m.tail_region >= regions) return bad("tail region out of range");
    if (m.tail_length == 0 || m.tail_length > kMaxTailBytes) return bad("tail length must be 1..1 GiB");
    if (m.tail_offset > lengths[m.tail_region] || m.tail_length > lengths[m.tail_region] - m.tail_offset)
      return bad("tail outside its region");
  }
  return ok_status();
}

Status decode_body(wire::Reader& r, MessageType type, MessageBody& body) {
  switch (type) {
    case MessageType::kDispatch: {
      DispatchMessage m;
      FABRIC_LIB_RETURN_IF_ERROR(decode_dispatch(r, m));
      body = std::move(m);
      return ok_status();
    }
    case MessageType::kCancel: {
      CancelMessage m;
      if (!r.str(m.request_id, kMaxRequestIdBytes, "request_id") || !r.u32(m.imm, "imm") || !r.u32(m.timeout_ms, "timeout_ms"))
        return bad("cancel: bad or truncated " + r.error());
      if (m.timeout_ms == 0) return bad("cancel: timeout_ms is 0");
      body = std::move(m);
      return ok_status();
    }
    case MessageType::kCancelConfirm: {
      CancelConfirmMessage m;
      uint8_t outcome = 0;
      if (!r.str(m.request_id, kMaxRequestIdBytes, "request_id") || !r.u32(m.imm, "imm") || !r.u8(outcome, "outcome") ||
          !r.u64(m.writes_completed, "writes_completed"))
        return bad("confirm: bad or truncated " + r.error());
      if (outcome < 1 || outcome > 3) return bad("confirm: unknown outcome");
      m.outcome = static_cast<CancelOutcome>(outcome);
      body = std::move(m);
      return ok_status();
    }
    case MessageType::kReject: {
      RejectMessage m;
      uint8_t code = 0, after = 0;
      if (!r.str(m.request_id, kMaxRequestIdBytes, "request_id") || !r.u32(m.imm, "imm") || !r.u8(code, "code") ||
          !r.u8(after, "after_writes") || !r.str(m.reason, kMaxReasonBytes, "reason", true))
        return bad("reject: bad or truncated " + r.error());
      if (code == 0 || code > static_cast<uint8_t>(ErrorCode::kInternal)) return bad("reject: unknown error code");
      if (after > 1) return bad("reject: after_writes must be 0 or 1");
      m.code = static_cast<ErrorCode>(code);
      m.after_writes = after == 1;
      body = std::move(m);
      return ok_status();
    }
    case MessageType::kHeartbeat: {
      HeartbeatMessage m;
      if (!r.u32(m.active, "active")) return bad("heartbeat: truncated");
      body = m;
      return ok_status();
    }
  }
  return bad("unknown message type " + std::to_string(static_cast<int>(type)));
}

}  // namespace

MessageType type_of(const MessageBody& body) {
  static constexpr MessageType kTypes[] = {MessageType::kDispatch, MessageType::kCancel, MessageType::kCancelConfirm,
                                           MessageType::kReject, MessageType::kHeartbeat};
  return kTypes[body.index()];
}

std::string_view message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kDispatch: return "dispatch";
    case MessageType::kCancel: return "cancel";
    case MessageType::kCancelConfirm: return "cancel_confirm";
    case MessageType::kReject: return "reject";
    case MessageType::kHeartbeat: return "heartbeat";
  }
  return "unknown";
}

std::vector<uint8_t> encode_message(const Message& message) {
  wire::Writer w;
  encode_header(w, message.header, type_of(message.body));
  std::visit([&](const auto& body) { encode_body(w, body); }, message.body);
  return w.take();
}

Result<MessageHeader> decode_header(std::span<const uint8_t> bytes, uint8_t* version) {
  wire::Reader r(bytes);
  std::span<const uint8_t> magic, sender;
  uint8_t v = 0, type = 0, role = 0, reserved = 1;
  uint16_t sender_len = 0;
  MessageHeader h;
  if (!r.bytes(4, magic, "magic") || !std::equal(magic.begin(), magic.end(), kMagic)) return bad("not a kv message (magic)");
  if (!r.u8(v, "version") || !r.u8(type, "type") || !r.u8(role, "role") || !r.u8(reserved, "reserved") ||
      !r.u64(h.incarnation, "incarnation") || !r.u16(sender_len, "sender length") || !r.bytes(sender_len, sender, "sender"))
    return bad("truncated header at " + r.error());
  if (version) *version = v;
  if (reserved != 0) return bad("header reserved byte is not 0");
  if (role != 1 && role != 2) return bad("unknown role");
  if (sender_len == 0 || sender_len > kMaxDomainAddressBytes) return bad("sender address length");
  auto addr = DomainAddress::from_bytes(sender);
  if (!addr.ok()) return bad("sender address: " + addr.status().message());
  h.sender = *std::move(addr);
  h.role = static_cast<Role>(role);
  h.type = static_cast<MessageType>(type);
  return h;
}

Result<Message> decode_message(std::span<const uint8_t> bytes) {
  uint8_t version = 0;
  auto header = decode_header(bytes, &version);
  if (!header.ok()) return header.status();
  if (version != kWireVersion) return bad("unsupported version " + std::to_string(version));
  wire::Reader r(bytes);
  std::span<const uint8_t> skip;
  r.bytes(18 + header->sender.bytes().size(), skip, "header");  // decoded above
  Message m;
  m.header = *std::move(header);
  FABRIC_LIB_RETURN_IF_ERROR(decode_body(r, m.header.type, m.body));
  if (!r.at_end()) return bad("trailing bytes after the " + std::string(message_type_name(m.header.type)));
  const bool from_decoder = m.header.type == MessageType::kDispatch || m.header.type == MessageType::kCancel;
  const bool from_prefiller = m.header.type == MessageType::kCancelConfirm || m.header.type == MessageType::kReject;
  if ((from_decoder && m.header.role != Role::kDecoder) || (from_prefiller && m.header.role != Role::kPrefiller))
    return bad(std::string(message_type_name(m.header.type)) + " from the wrong role");
  return m;
}

}  // namespace fabric_lib::kv
