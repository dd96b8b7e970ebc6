#include <gtest/gtest.h>

#include "fabric_lib/kv/messages.h"

namespace fabric_lib::kv {
namespace {

DomainAddress address(uint8_t seed) {
  std::vector<uint8_t> b(16);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(seed + i);
  return *DomainAddress::from_bytes(b);
}

MrDesc region(uint64_t length, Access access = Access::kRemoteWrite) {
  return *MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 0x10000, length, access,
                         {MrDomainEntry{address(7), 42, 0, {}}});
}

MessageHeader header(Role role) { return {MessageType::kHeartbeat, role, 0x1234567890abcdefull, address(1)}; }

DispatchMessage dispatch() {
  DispatchMessage m;
  m.request_id = "req-1";
  m.layout = {AttentionKind::kGqa, DType::kBF16, 2, 16, 64, 4};
  m.fingerprint = m.layout.fingerprint();
  m.decoder = {0, 1, KvPacking::kSeparate};
  m.prefill_rank = 0;
  m.prefill_tp = 2;
  m.domains = 4;
  m.num_tokens = 40;  // 3 pages
  m.first_page = 1;
  m.dst_pages = {7, 2};
  m.imm = 0xA0010003;
  m.timeout_ms = 5000;
  uint64_t total = 0;
  m.memory = KvMemoryLayout::contiguous(m.layout, 1, KvPacking::kSeparate, 8, 0, 0, &total);
  m.regions = {region(total), region(4096)};
  m.has_tail = true;
  m.tail_region = 1;
  m.tail_offset = 1024;
  m.tail_length = 3072;
  return m;
}

std::vector<uint8_t> encode(const MessageBody& body, Role role) { return encode_message({header(role), body}); }

TEST(KvMessages, EveryTypeRoundTrips) {
  const std::vector<std::pair<MessageBody, Role>> bodies = {
      {dispatch(), Role::kDecoder},
      {CancelMessage{"req-1", 77, 100}, Role::kDecoder},
      {CancelConfirmMessage{"req-1", 77, CancelOutcome::kUnknown, 12}, Role::kPrefiller},
      {RejectMessage{"req-1", 77, ErrorCode::kInvalidArgument, true, "layout mismatch: page_tokens 16 != 32"}, Role::kPrefiller},
      {HeartbeatMessage{3}, Role::kPrefiller},
  };
  for (const auto& [body, role] : bodies) {
    const std::vector<uint8_t> bytes = encode(body, role);
    auto m = decode_message(bytes);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->header.type, type_of(body));
    EXPECT_EQ(m->header.role, role);
    EXPECT_EQ(m->header.incarnation, 0x1234567890abcdefull);
    EXPECT_EQ(m->header.sender, address(1));
    EXPECT_EQ(encode_message(*m), bytes) << message_type_name(type_of(body));
  }
  auto d = decode_message(encode(dispatch(), Role::kDecoder));
  const auto& got = std::get<DispatchMessage>(d->body);
  EXPECT_EQ(got.dst_pages, (std::vector<uint32_t>{7, 2}));
  EXPECT_EQ(got.memory, dispatch().memory);
  EXPECT_EQ(got.regions[1], region(4096));
  EXPECT_EQ(got.tail_offset, 1024u);
}

TEST(KvMessages, EveryTruncationIsMalformed) {
  const std::vector<uint8_t> bytes = encode(dispatch(), Role::kDecoder);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto m = decode_message(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(m.ok()) << n;
    ASSERT_EQ(m.status().code(), ErrorCode::kMalformed);
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode_message(longer).status().code(), ErrorCode::kMalformed);
}

TEST(KvMessages, EveryByteFlipDecodesCanonicallyOrIsMalformed) {
  const std::vector<uint8_t> bytes = encode(dispatch(), Role::kDecoder);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> b = bytes;
      b[i] ^= flip;
      auto m = decode_message(b);
      if (m.ok()) {
        ASSERT_EQ(encode_message(*m), b) << "byte " << i;
      } else {
        ASSERT_EQ(m.status().code(), ErrorCode::kMalformed);
      }
    }
  }
}

Status decode_dispatch(DispatchMessage m, Role role = Role::kDecoder) {
  return decode_message(encode(std::move(m), role)).status();
}

TEST(KvMessages, SemanticRulesAreChecked) {
  EXPECT_TRUE(decode_dispatch(dispatch()).ok());
  auto with = [](auto change) {
    DispatchMessage m = dispatch();
    change(m);
    return decode_dispatch(m).code();
  };
  const ErrorCode kBad = ErrorCode::kMalformed;
  EXPECT_EQ(with([](DispatchMessage& m) { m.fingerprint ^= 1; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.dst_pages = {7, 8}; }), kBad) << "page outside the cache";
  EXPECT_EQ(with([](DispatchMessage& m) { m.dst_pages = {7, 7}; }), kBad) << "a page twice";
  EXPECT_EQ(with([](DispatchMessage& m) { m.dst_pages = {7}; }), kBad) << "count vs tokens";
  EXPECT_EQ(with([](DispatchMessage& m) { m.first_page = 4; m.dst_pages = {}; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.has_tail = false; }), ErrorCode::kOk) << "a request without a tail";
  EXPECT_EQ(with([](DispatchMessage& m) { m.prefill_rank = 1; }), kBad) << "rank 1 must not send the tail";
  EXPECT_EQ(with([](DispatchMessage& m) { m.tail_length = 4000; }), kBad) << "tail past its region";
  EXPECT_EQ(with([](DispatchMessage& m) { m.prefill_tp = 3; }), kBad) << "3 does not divide 4 heads";
  EXPECT_EQ(with([](DispatchMessage& m) { m.decoder.tp_rank = 1; }), kBad) << "rank outside tp";
  EXPECT_EQ(with([](DispatchMessage& m) { m.memory.page_stride -= 1; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.memory.k[1].offset += 1 << 20; }), kBad) << "buffer past its region";
  EXPECT_EQ(with([](DispatchMessage& m) { m.regions[0] = region(m.regions[0].length(), Access::kLocalOnly); }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.timeout_ms = 0; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.domains = 0; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.request_id = ""; }), kBad);
  EXPECT_EQ(with([](DispatchMessage& m) { m.request_id = std::string(300, 'x'); }), kBad);
  EXPECT_EQ(decode_dispatch(dispatch(), Role::kPrefiller).code(), kBad) << "a dispatch from a prefiller";
  // Prefix reuse: the decoder holds every page, only the tail is left.
  EXPECT_TRUE(decode_dispatch([] { DispatchMessage m = dispatch(); m.first_page = 3; m.dst_pages = {}; return m; }()).ok());
}

TEST(KvMessages, HeaderRulesAreChecked) {
  std::vector<uint8_t> b = encode(HeartbeatMessage{1}, Role::kDecoder);
  ASSERT_TRUE(decode_message(b).ok());
  std::vector<uint8_t> v2 = b;
  v2[4] = 2;
  auto m = decode_message(v2);
  EXPECT_EQ(m.status().code(), ErrorCode::kMalformed);
  EXPECT_NE(m.status().message().find("version 2"), std::string::npos);
  uint8_t version = 0;
  auto h = decode_header(v2, &version);
  ASSERT_TRUE(h.ok()) << "the header of another version still names its sender";
  EXPECT_EQ(version, 2);
  EXPECT_EQ(h->sender, address(1));
  std::vector<uint8_t> unknown = b;
  unknown[5] = 9;
  EXPECT_EQ(decode_message(unknown).status().code(), ErrorCode::kMalformed);
  std::vector<uint8_t> magic = b;
  magic[0] = 'X';
  EXPECT_FALSE(decode_header(magic).ok());
}

}  // namespace
}  // namespace fabric_lib::kv
