// The liveness probe's control message codec: round trip and rejection of malformed bytes.
#include <gtest/gtest.h>

#include "core/probe_message.h"

namespace fabric_lib::detail {
namespace {

ProbeMessage sample() {
  return ProbeMessage{ProbeMessage::Type::kPong, 3, 0x1122334455667788ull, std::vector<uint8_t>(16, 7),
                      std::vector<uint8_t>(28, 9)};
}

// Encode/decode round trip keeps every field.
TEST(ProbeMessage, RoundTrip) {
  const ProbeMessage m = sample();
  auto back = ProbeMessage::decode(m.encode());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->type, m.type);
  EXPECT_EQ(back->domain, m.domain);
  EXPECT_EQ(back->seq, m.seq);
  EXPECT_EQ(back->key, m.key);
  EXPECT_EQ(back->address, m.address);
  EXPECT_LE(m.encode().size(), kMaxProbeMessageBytes);
}

// Every truncation, a trailing byte, a bad magic/version/type and empty addresses are malformed.
TEST(ProbeMessage, RejectsMalformedBytes) {
  const std::vector<uint8_t> good = sample().encode();
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(ProbeMessage::decode(std::span(good).first(n)).status().code(), ErrorCode::kMalformed) << n;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_EQ(ProbeMessage::decode(longer).status().code(), ErrorCode::kMalformed);
  for (size_t at : {size_t{0}, size_t{4}, size_t{5}}) {  // magic, version, type
    auto bad = good;
    bad[at] ^= 0x5a;
    EXPECT_EQ(ProbeMessage::decode(bad).status().code(), ErrorCode::kMalformed) << at;
  }
  ProbeMessage empty = sample();
  empty.key.clear();
  EXPECT_EQ(ProbeMessage::decode(empty.encode()).status().code(), ErrorCode::kMalformed);
}

}  // namespace
}  // namespace fabric_lib::detail
