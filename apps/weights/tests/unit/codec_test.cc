#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "support/fixtures.h"

namespace fabric_lib::weights::testing {
namespace {

template <typename T, typename D>
void round_trip(const T& value, D decode) {
  const std::vector<uint8_t> b = encode(value);
  Result<T> back = decode(b);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == value);
  // Every truncation fails cleanly; so does a trailing byte.
  for (size_t n = 0; n < b.size(); n += std::max<size_t>(1, b.size() / 4000)) {
    EXPECT_FALSE(decode(std::span<const uint8_t>(b.data(), n)).ok()) << n;
  }
  // A cut inside the header (magic, version, kind) says so (it used to name the missing byte's
  // garbage as an unexpected kind or version).
  for (size_t n = 0; n < 6 && n < b.size(); ++n) {
    const std::string why = decode(std::span<const uint8_t>(b.data(), n)).status().to_string();
    EXPECT_NE(why.find("truncated"), std::string::npos) << n << ": " << why;
  }
  std::vector<uint8_t> longer = b;
  longer.push_back(0);
  EXPECT_FALSE(decode(longer).ok());
  // Random corruption never crashes (the fuzzer goes further).
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> c = b;
    c[rng() % c.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    (void)decode(c);
  }
}

TEST(Codec, MetadataRoundTrips) {
  round_trip(model_trainers(4, 2)[1], decode_trainer_metadata);
  round_trip(model_inference(2, true, 2)[0], decode_inference_metadata);
}

TEST(Codec, SetupMessagesRoundTrip) {
  Result<Schedule> s = plan_schedule(model_trainers(4, 2), model_inference(2, true, 2));
  ASSERT_TRUE(s.ok());
  TrainerSetup ts;
  ts.trainers = 4;
  ts.inference = 2;
  ts.domains = 2;
  ts.group_names = s->group_names;
  ts.fingerprint = fingerprint(*s);
  ts.plan = s->trainers[2];
  for (const Target& t : ts.plan.targets) {
    ts.target_descs.push_back(t.kind == Target::Kind::kInference ? fake_desc("x", 1 << 20, 2) : MrDesc());
  }
  ts.inference_barrier = {fake_desc("i0", 64, 2), fake_desc("i1", 64, 2)};
  round_trip(ts, decode_trainer_setup);
  round_trip(InferenceSetup{4, 99, s->inference[1]}, decode_inference_setup);
  round_trip(TrainerReady{3, fake_desc("st", 4096, 2)}, decode_trainer_ready);
  round_trip(Peers{{fake_desc("a", 64, 1), fake_desc("b", 64, 1)}}, decode_peers);
  round_trip(PlanError{"weights metadata: parameter 'x' ..."}, decode_plan_error);
  EXPECT_EQ(*message_kind(encode(PlanError{"e"})), MessageKind::kPlanError);
}

TEST(Codec, RejectsInconsistentPlans) {
  Result<Schedule> s = plan_schedule(model_trainers(4, 2), model_inference(2, true, 2));
  ASSERT_TRUE(s.ok());
  TrainerSetup ts{4, 2, 2, s->group_names, 1, s->trainers[0], {}, {fake_desc("i0", 64, 2), fake_desc("i1", 64, 2)}};
  for (const Target& t : ts.plan.targets) {
    ts.target_descs.push_back(t.kind == Target::Kind::kInference ? fake_desc("x", 1 << 20, 2) : MrDesc());
  }
  ASSERT_TRUE(decode_trainer_setup(encode(ts)).ok());
  TrainerSetup bad = ts;
  bad.plan.tasks[0].writes[0].domain = 2;  // only 2 domains
  EXPECT_FALSE(decode_trainer_setup(encode(bad)).ok());
  bad = ts;
  bad.plan.tasks[0].writes[0].target = static_cast<uint32_t>(bad.plan.targets.size());
  EXPECT_FALSE(decode_trainer_setup(encode(bad)).ok());
  bad = ts;
  bad.plan.tasks[0].writes[0].pages = 0;
  EXPECT_FALSE(decode_trainer_setup(encode(bad)).ok());
  bad = ts;
  bad.plan.tasks[0].group = 7;
  EXPECT_FALSE(decode_trainer_setup(encode(bad)).ok());
  bad = ts;
  bad.target_descs.pop_back();
  EXPECT_FALSE(decode_trainer_setup(encode(bad)).ok());
  std::vector<uint8_t> b = encode(ts);
  b[4] = kWeightsFormatVersion + 1;
  EXPECT_EQ(decode_trainer_setup(b).status().code(), ErrorCode::kMalformed);
  b = encode(ts);
  b[5] = static_cast<uint8_t>(MessageKind::kPeers);
  EXPECT_FALSE(decode_trainer_setup(b).ok());
}

TEST(Framing, ReassemblesInAnyOrderAndRejectsBadFrames) {
  std::vector<uint8_t> msg(100000);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7);
  auto frames = frame_message(msg, 42, 1, 4096);
  ASSERT_EQ(frames.size(), (msg.size() + 4096 - kFrameHeaderBytes - 1) / (4096 - kFrameHeaderBytes));
  std::mt19937 rng(3);
  std::shuffle(frames.begin(), frames.end(), rng);
  Reassembler r;
  std::optional<std::vector<uint8_t>> got;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto x = r.add(frames[i]);
    ASSERT_TRUE(x.ok());
    if (i + 1 < frames.size()) {
      EXPECT_FALSE(x->has_value());
    } else {
      got = std::move(*x);
    }
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, msg);
  EXPECT_EQ(r.pending(), 0u);
  // Interleaved messages from two streams, a duplicate, and broken frames.
  auto a = frame_message(msg, 1, 5, 8192), b = frame_message(msg, 2, 5, 8192);
  ASSERT_TRUE(r.add(a[0]).ok());
  ASSERT_TRUE(r.add(b[0]).ok());
  EXPECT_FALSE(r.add(a[0]).ok());  // duplicate drops stream 1's message
  EXPECT_EQ(r.pending(), 1u);
  std::vector<uint8_t> cut = b[1];
  cut.pop_back();
  EXPECT_FALSE(r.add(cut).ok());
  std::vector<uint8_t> lie = b[2];
  lie[26] ^= 1;  // chunk count
  EXPECT_FALSE(r.add(lie).ok());
  EXPECT_FALSE(r.add(std::vector<uint8_t>{1, 2, 3}).ok());
  auto small = frame_message(std::vector<uint8_t>{9, 8, 7}, 3, 1, 100);
  ASSERT_EQ(small.size(), 1u);
  auto one = r.add(small[0]);
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ(**one, (std::vector<uint8_t>{9, 8, 7}));
  Reassembler tight(1000);
  EXPECT_EQ(tight.add(frame_message(msg, 1, 1, 4096)[0]).status().code(), ErrorCode::kResourceExhausted);
}

}  // namespace
}  // namespace fabric_lib::weights::testing
