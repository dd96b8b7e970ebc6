// Bad input fails synchronously with a clear Status, has no side effect, and leaves the engine
// usable: a correct write afterwards still lands.
#include "integration/engine_fixture.h"

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

TEST_P(BadInputTest, EachFailsWithAClearStatusAndTheEngineStaysUsable) {
  const size_t region = 1 << 20;
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
  auto code = [&](Result<TransferId> r) { return r.status().code(); };
  auto write = [&](WriteRequest w) { return code(engine->submit_write(std::move(w), Completion::counter(never))); };

  // Unknown and unregistered local regions.
  EXPECT_EQ(write({MrHandle{987654}, 0, dst, 0, 16}), ErrorCode::kNotFound);
  EXPECT_EQ(write({gone.reg.handle, 0, dst, 0, 16}), ErrorCode::kNotFound);
  // Past the end of the local or remote region (and offset overflow).
  EXPECT_EQ(write({src.reg.handle, region - 8, dst, 0, 16}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, 0, dst, region - 8, 16}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, UINT64_MAX, dst, 0, 2}), ErrorCode::kOutOfRange);
  EXPECT_EQ(write({src.reg.handle, 0, dst, UINT64_MAX - 1, 4}), ErrorCode::kOutOfRange);
  // Zero length without an imm; a pinned domain that does not exist.
  EXPECT_EQ(write({src.reg.handle, 0, dst, 0, 0}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, dst, 0, 16, std::nullopt, Pinned{static_cast<uint32_t>(domains())}}),
            ErrorCode::kInvalidArgument);
  // A descriptor from a group of another size, an empty one, a local-only one.
  EXPECT_EQ(write({src.reg.handle, 0, with_domains(dst, domains() + 1), 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, MrDesc(), 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write({src.reg.handle, 0, src.reg.desc, 0, 16}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(engine->submit_imm(1, with_domains(dst, domains() + 1), Completion())), ErrorCode::kInvalidArgument);
  // Malformed descriptor bytes from the network never become a descriptor.
  std::vector<uint8_t> bytes = dst.to_bytes();
  EXPECT_EQ(MrDesc::from_bytes(std::span(bytes).first(bytes.size() - 1)).status().code(), ErrorCode::kMalformed);
  bytes.push_back(0);
  EXPECT_EQ(MrDesc::from_bytes(bytes).status().code(), ErrorCode::kMalformed);
  EXPECT_EQ(MrDesc::from_hex("not hex at all").status().code(), ErrorCode::kMalformed);
  EXPECT_EQ(DomainAddress::from_hex("").status().code(), ErrorCode::kMalformed);

  // Paged writes: mismatched lists, a page past either end, overlapping strides, no pages.
  PagedWriteRequest p{src.reg.handle, dst, 4096, {0, 1}, {0, 1}, 4096, 4096};
  PagedWriteRequest bad = p;
  bad.dst_pages = {0};
  EXPECT_EQ(code(engine->submit_paged_writes(bad, Completion())), ErrorCode::kInvalidArgument);
  bad = p;
  bad.src_pages = {0, 256};
  EXPECT_EQ(code(engine->submit_paged_writes(bad, Completion())), ErrorCode::kOutOfRange);
  bad = p;
  bad.dst_pages = {0, 256};
  EXPECT_EQ(code(engine->submit_paged_writes(bad, Completion())), ErrorCode::kOutOfRange);
  bad = p;
  bad.src_stride = 100;
  EXPECT_EQ(code(engine->submit_paged_writes(bad, Completion())), ErrorCode::kInvalidArgument);
  bad = p;
  bad.src_pages.clear();
  bad.dst_pages.clear();
  EXPECT_EQ(code(engine->submit_paged_writes(bad, Completion())), ErrorCode::kInvalidArgument);

  // Scatter and barrier: nothing to do, a peer index outside the group, an empty peer list.
  EXPECT_EQ(code(engine->submit_scatter({src.reg.handle, {}}, Completion())), ErrorCode::kInvalidArgument);
  auto group = engine->add_peer_group(std::vector<MrDesc>{dst});
  ASSERT_TRUE(group.ok());
  ScatterRequest s{src.reg.handle, {{16, 0, 0, MrDesc(), 1}}};
  s.group = &*group;
  EXPECT_EQ(code(engine->submit_scatter(s, Completion())), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(engine->submit_barrier(1, {}, Completion())), ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->add_peer_group(std::vector<MrDesc>{with_domains(dst, domains() + 1)}).status().code(),
            ErrorCode::kInvalidArgument);
  // Registration: null pointer, zero length, a group that does not exist.
  EXPECT_EQ(engine->register_memory(nullptr, 16, Access::kRemoteWrite).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->register_memory(src.bytes.data(), 0, Access::kRemoteWrite).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(engine->register_memory(src.bytes.data(), 16, Access::kRemoteWrite, MemoryKind::kHost, 5).status().code(),
            ErrorCode::kInvalidArgument);

  // None of the above was accepted, and a correct write still works.
  EXPECT_EQ(engine->stats().requests_submitted, 0u);
  CompletionCounter done;
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, dst, 0, region, 5}, Completion::counter(done)).ok());
  EXPECT_TRUE(agent.expect_imms(5, imm_count_of_write(region, RoundRobin{}, domains())));
  wait_all(done, 1);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.hash(0, region), hash_hex(src.bytes.data(), region));
  EXPECT_EQ(never.finished(), 0u);
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
