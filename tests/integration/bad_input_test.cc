// Bad input fails synchronously with a clear Status, has no side effect, and leaves the engine
// usable: a correct write afterwards still lands.
#include "integration/engine_fixture.h"
#include "support/outcomes.h"

namespace fabric_lib::testing {
namespace {

using BadInputTest = EngineTest;

// A copy of `desc` claiming `domains` domains (entries repeated), as a peer of another group
// size would send.
MrDesc with_domains(const MrDesc& desc, size_t domains) {
  std::vector<MrDomainEntry> entries;
  for (size_t d = 0; d < domains; ++d) entries.push_back(desc.domain(d % desc.num_domains()));
  return *MrDesc::create(desc.transport(), desc.memory_kind(), desc.ptr(), desc.length(), desc.access(), entries);
}

// Every refused request carries an imm value of its own (kRefusedImm + k): the target must
// never count any of them, and its region must stay all zeros until the valid write.
constexpr uint32_t kRefusedImm = 900;

TEST_P(BadInputTest, EachFailsWithAClearStatusAndTheEngineStaysUsable) {
  const size_t region = 1 << 20;
  Outcomes out(1);  // the valid write's; before the engine, which may call it until stopped
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 71);
  SourceBuffer gone(*engine, 4096, 72);
  ASSERT_TRUE(engine->unregister_memory(gone.reg.handle).ok());
  EXPECT_EQ(engine->unregister_memory(gone.reg.handle).code(), ErrorCode::kNotFound);
  const MrDesc dst = agent.desc();
  CompletionCounter never;
  uint32_t next_imm = kRefusedImm;
  auto code = [&](Result<TransferId> r) { return r.status().code(); };
  auto write = [&](WriteRequest w) {
    w.imm = next_imm++;
    return code(engine->submit_write(std::move(w), Completion::counter(never)));
  };

  // Unknown and unregistered local regions.
  EXPECT_EQ(write({MrHandle{987654}, 0, dst, 0, 16}), ErrorCode::kNotFound);
  EXPECT_EQ(write({gone.reg.handle, 0, dst, 0, 16}), ErrorCode::kNotFound);
  // Past the end of the local or remote region (and offset overflow).
  EXPECT_EQ(write({src.reg.handle, region - 8, dst, 0, 16}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, 0, dst, region - 8, 16}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, UINT64_MAX, dst, 0, 2}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, 0, dst, UINT64_MAX - 1, 4}), ErrorCode::kOutOfRange);
  // Zero length without an imm (the one refused request without one); a pinned domain that does not exist.
  EXPECT_EQ(code(engine->submit_write({src.reg.handle, 0, dst, 0, 0}, Completion::counter(never))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, dst, 0, 16, std::nullopt, Pinned{static_cast<uint32_t>(domains())}}),
            ErrorCode::kInvalidArgument);
  // A descriptor from a group of another size, an empty one, a local-only one.
  EXPECT_EQ(write({src.reg.handle, 0, with_domains(dst, domains() + 1), 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, MrDesc(), 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, src.reg.desc, 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(engine->submit_imm(next_imm++, with_domains(dst, domains() + 1), Completion::counter(never))),
            ErrorCode::kInvalidArgument);
  // Malformed descriptor bytes from the network never become a descriptor.
  std::vector<uint8_t> bytes = dst.to_bytes();
  EXPECT_EQ(MrDesc::from_bytes(std::span(bytes).first(bytes.size() - 1)).status().code(), ErrorCode::kMalformed);
  bytes.push_back(0);
  EXPECT_EQ(MrDesc::from_bytes(bytes).status().code(), ErrorCode::kMalformed);
  EXPECT_EQ(MrDesc::from_hex("not hex at all").status().code(), ErrorCode::kMalformed);
  EXPECT_EQ(DomainAddress::from_hex("").status().code(), ErrorCode::kMalformed);

  // Paged writes: mismatched lists, a page past either end, overlapping strides, no pages.
  PagedWriteRequest p{src.reg.handle, dst, 4096, {0, 1}, {0, 1}, 4096, 4096};
  auto paged = [&](PagedWriteRequest bad) {
    bad.imm = next_imm++;
    return code(engine->submit_paged_writes(std::move(bad), Completion::counter(never)));
  };
  PagedWriteRequest bad = p;
  bad.dst_pages = {0};
  EXPECT_EQ(paged(bad), ErrorCode::kInvalidArgument);
  bad = p;
  bad.src_pages = {0, 256};
  EXPECT_EQ(paged(bad), ErrorCode::kOutOfRange);
  bad = p;
  bad.dst_pages = {0, 256};
  EXPECT_EQ(paged(bad), ErrorCode::kOutOfRange);
  bad = p;
  bad.src_stride = 100;
  EXPECT_EQ(paged(bad), ErrorCode::kInvalidArgument);
  bad = p;
  bad.src_pages.clear();
  bad.dst_pages.clear();
  EXPECT_EQ(paged(bad), ErrorCode::kInvalidArgument);

  // Scatter and barrier: nothing to do, a peer index outside the group, an empty peer list.
  EXPECT_EQ(code(engine->submit_scatter({src.reg.handle, {}, next_imm++}, Completion::counter(never))), ErrorCode::kInvalidArgument);
  auto group = engine->add_peer_group(std::vector<MrDesc>{dst});
  ASSERT_TRUE(group.ok());
  ScatterRequest s{src.reg.handle, {{16, 0, 0, MrDesc(), 1}}, next_imm++};
  s.group = &*group;
  EXPECT_EQ(code(engine->submit_scatter(s, Completion::counter(never))), ErrorCode::kInvalidArgument);
  // A member's range is still checked on every submit (the member itself only when the group was made).
  s.targets = {{16, 0, region - 8, MrDesc(), 0}};
  EXPECT_EQ(code(engine->submit_scatter(s, Completion::counter(never))), ErrorCode::kOutOfRange);
  s.targets = {{4, 0, UINT64_MAX - 1, MrDesc(), 0}};
  EXPECT_EQ(code(engine->submit_scatter(s, Completion::counter(never))), ErrorCode::kOutOfRange);
  // Without a group, a descriptor named again is checked once but each target's range every time:
  // the second target's range is refused, and the message names that target.
  s.group = nullptr;
  s.targets = {{16, 0, 0, dst, 0}, {16, 0, region - 8, dst, 0}};
  Result<TransferId> repeated = engine->submit_scatter(s, Completion::counter(never));
  EXPECT_EQ(code(repeated), ErrorCode::kOutOfRange);
  EXPECT_NE(repeated.status().message().find("scatter target 1"), std::string::npos) << repeated.status().to_string();
  // A separately decoded copy of a descriptor is another identity: fully checked (and refused
  // here for its domain count, like any descriptor of another engine's shape).
  s.targets = {{16, 0, 0, dst, 0}, {16, 0, 0, with_domains(dst, domains() + 1), 0}};
  EXPECT_EQ(code(engine->submit_scatter(s, Completion::counter(never))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(engine->submit_barrier(next_imm++, {}, Completion::counter(never))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->add_peer_group(std::vector<MrDesc>{with_domains(dst, domains() + 1)}).status().code(),
            ErrorCode::kInvalidArgument);
  // Registration: null pointer, zero length, a group that does not exist.
  EXPECT_EQ(engine->register_memory(nullptr, 16, Access::kRemoteWrite).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->register_memory(src.bytes.data(), 0, Access::kRemoteWrite).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->register_memory(src.bytes.data(), 16, Access::kRemoteWrite, MemoryKind::kHost, 5).status().code(),
            ErrorCode::kInvalidArgument);

  // None of the above was accepted or reached the target: nothing submitted or posted here; at
  // the target, after a quiet interval, no imm counted (of any value) and the region all zeros.
  EXPECT_EQ(engine->stats().requests_submitted, 0u);
  EXPECT_EQ(engine->stats().wrs_posted, 0u);
  EXPECT_EQ(agent.quiet(kRefusedImm, 0), "ok");
  for (uint32_t imm = kRefusedImm; imm < next_imm; ++imm) EXPECT_EQ(agent.count(imm), 0u) << "imm " << imm;
  EXPECT_EQ(agent.stats().imms_received, 0u);
  EXPECT_EQ(agent.hash(0, region), hash_hex(std::vector<uint8_t>(region, 0).data(), region));

  // A correct write still works.
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, dst, 0, region, 5}, out.sink(0)).ok());
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.hash(0, region), hash_hex(src.bytes.data(), region));
  EXPECT_EQ(agent.expect_exactly(5, imm_count_of_write(region, RoundRobin{}, domains())), "ok");
  EXPECT_EQ(never.finished(), 0u);
  for (uint32_t imm = kRefusedImm; imm < next_imm; ++imm) EXPECT_EQ(agent.count(imm), 0u) << "imm " << imm;
}

// After stop(), every submit and registration returns Stopped.
TEST_P(BadInputTest, EverySubmitAfterStopIsRefused) {
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 4096, 73);
  ASSERT_TRUE(engine->stop().ok());
  const MrDesc dst = agent.desc();
  auto code = [](auto r) { return r.status().code(); };
  EXPECT_EQ(code(engine->submit_write({src.reg.handle, 0, dst, 0, 16}, Completion())), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->submit_paged_writes({src.reg.handle, dst, 16, {0}, {0}}, Completion())), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->submit_scatter({src.reg.handle, {{16, 0, 0, dst}}}, Completion())), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->submit_imm(1, dst, Completion())), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->submit_barrier(1, std::vector<MrDesc>{dst}, Completion())), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->submit_send(agent.address(), std::vector<uint8_t>(4), Completion())), ErrorCode::kStopped);
  EXPECT_EQ(engine->post_recvs(1, 64, [](std::span<const uint8_t>) {}).code(), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->register_memory(src.bytes.data(), 16, Access::kRemoteWrite)), ErrorCode::kStopped);
  EXPECT_EQ(code(engine->add_peer_group(std::vector<MrDesc>{dst})), ErrorCode::kStopped);
  EXPECT_EQ(engine->imms().expect(1, 1, Completion()).code(), ErrorCode::kStopped);
}

INSTANTIATE_TEST_SUITE_P(Matrix, BadInputTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing
