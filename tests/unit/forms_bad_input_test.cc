// Bad input to the request forms fails synchronously with a clear Status and no side effect:
// prepared handles from another engine or with an unregistered source, page lists outside the
// prepared bounds, slices outside their windows or of the wrong count, cancel of ids that are not
// in flight, and malformed templates and repeating expectations. Two tcp engines in this process.
#include <gtest/gtest.h>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

std::unique_ptr<TransferEngine> two_domain_tcp_engine() {
  auto e = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build();
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The code, with the message checked to say something (a clear Status, not a bare code).
ErrorCode code_of(const Status& s) {
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty()) << "no message for " << error_code_name(s.code());
  }
  return s.code();
}
template <typename T>
ErrorCode code_of(const Result<T>& r) {
  return code_of(r.status());
}

class FormsBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    target = two_domain_tcp_engine();
    engine = two_domain_tcp_engine();
    other = two_domain_tcp_engine();
    ASSERT_TRUE(target && engine && other);
    auto d = target->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
    ASSERT_TRUE(d.ok());
    desc = d->desc;
    auto s = engine->register_memory(src.data(), src.size(), Access::kLocalOnly);
    ASSERT_TRUE(s.ok());
    handle = s->handle;
    auto g = engine->add_peer_group(std::vector<MrDesc>{desc});
    ASSERT_TRUE(g.ok());
    group = *g;
  }
  void TearDown() override {
    // None of the bad calls was accepted.
    if (engine) {
      EXPECT_EQ(engine->stats().requests_submitted, accepted);
    }
    for (auto* e : {engine.get(), other.get(), target.get()}) {
      if (e) e->stop();
    }
  }
  PagedWriteTemplate paged() const { return {handle, desc, 4096, 4096, 4096, 0, 0, 16, 16}; }
  ScatterTemplate scatter() const {
    ScatterTemplate t;
    t.src = handle;
    t.group = &group;
    t.targets = {{0, 0, 8192, 0, 8192}, {0, 8192, 8192, 8192, 8192}};
    return t;
  }

  std::vector<uint8_t> dst = std::vector<uint8_t>(1 << 20, 0);
  std::vector<uint8_t> src = std::vector<uint8_t>(1 << 20, 5);
  std::unique_ptr<TransferEngine> target, engine, other;
  MrDesc desc;
  MrHandle handle;
  PeerGroup group;
  uint64_t accepted = 0;
};

TEST_F(FormsBadInput, PrepareRefusesBadTemplates) {
  PagedWriteTemplate t = paged();
  t.src_page_bound = 0;
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kInvalidArgument);
  t = paged();
  t.page_length = 0;
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kInvalidArgument);
  t = paged();
  t.dst_stride = 100;  // overlapping pages
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kInvalidArgument);
  t = paged();
  t.src_page_bound = 257;  // page 256 ends past the 1 MiB source
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kOutOfRange);
  t = paged();
  t.dst_offset = 1;
  t.dst_page_bound = 256;
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kOutOfRange);
  t = paged();
  t.src = MrHandle{999999};
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kNotFound);
  t = paged();
  t.route = Pinned{2};
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kInvalidArgument);
  t = paged();
  t.dst = MrDesc();
  EXPECT_EQ(code_of(engine->prepare_paged_writes(t)), ErrorCode::kInvalidArgument);

  ScatterTemplate s = scatter();
  s.group = nullptr;
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kInvalidArgument);
  s = scatter();
  s.targets.clear();
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kInvalidArgument);
  s = scatter();
  s.targets[1].peer = 1;  // the group has one peer
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kInvalidArgument);
  s = scatter();
  s.targets[0].src_window = 2 << 20;
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kOutOfRange);
  s = scatter();
  s.targets[1].dst_offset = (1 << 20) - 100;
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kOutOfRange);
  s = scatter();
  s.route = Pinned{7};
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kInvalidArgument);
  // A PeerGroup resolved by another engine.
  auto foreign = other->add_peer_group(std::vector<MrDesc>{desc});
  ASSERT_TRUE(foreign.ok());
  s = scatter();
  s.group = &*foreign;
  EXPECT_EQ(code_of(engine->prepare_scatter(s)), ErrorCode::kInvalidArgument);
  ScatterRequest plain{handle, {{16, 0, 0, MrDesc(), 0}}, 1};  // the plain form too
  plain.group = &*foreign;
  EXPECT_EQ(code_of(engine->submit_scatter(plain, Completion())), ErrorCode::kInvalidArgument);
}

TEST_F(FormsBadInput, SubmitPreparedRefusesWhatLeavesTheBounds) {
  Result<PreparedPagedWrites> p = engine->prepare_paged_writes(paged());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::vector<uint32_t> two = {0, 1};
  EXPECT_EQ(code_of(engine->submit_prepared(*p, std::vector<uint32_t>{0, 16}, two, 1, Completion())),
            ErrorCode::kOutOfRange);
  EXPECT_EQ(code_of(engine->submit_prepared(*p, two, std::vector<uint32_t>{16, 0}, 1, Completion())),
            ErrorCode::kOutOfRange);
  EXPECT_EQ(code_of(engine->submit_prepared(*p, two, std::vector<uint32_t>{0}, 1, Completion())),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->submit_prepared(*p, std::vector<uint32_t>{}, std::vector<uint32_t>{}, 1, Completion())),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->submit_prepared(PreparedPagedWrites(), two, two, 1, Completion())),
            ErrorCode::kInvalidArgument);
  // A long list (its largest indices are found in lanes): the one page past a bound, at any
  // position, is refused and named.
  for (size_t at : {size_t{0}, size_t{15}, size_t{16}, size_t{37}, size_t{39}}) {
    std::vector<uint32_t> ok(40, 3);
    std::vector<uint32_t> past = ok;
    past[at] = 16;
    Result<TransferId> r = engine->submit_prepared(*p, past, ok, 1, Completion());
    ASSERT_EQ(code_of(r), ErrorCode::kOutOfRange) << "source page " << at;
    EXPECT_NE(r.status().message().find("page " + std::to_string(at) + " ("), std::string::npos) << r.status().message();
    r = engine->submit_prepared(*p, ok, past, 1, Completion());
    ASSERT_EQ(code_of(r), ErrorCode::kOutOfRange) << "destination page " << at;
    EXPECT_NE(r.status().message().find("page " + std::to_string(at) + " ("), std::string::npos) << r.status().message();
  }

  Result<PreparedScatter> s = engine->prepare_scatter(scatter());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto submit = [&](std::vector<ScatterSlice> slices, std::optional<uint32_t> imm = 1) {
    return code_of(engine->submit_prepared(*s, slices, imm, Completion()));
  };
  EXPECT_EQ(submit({{8193, 0, 0}, {0, 0, 0}}), ErrorCode::kOutOfRange);        // longer than the window
  EXPECT_EQ(submit({{100, 8100, 0}, {0, 0, 0}}), ErrorCode::kOutOfRange);      // past the source window
  EXPECT_EQ(submit({{100, 0, 0}, {100, 0, 8100}}), ErrorCode::kOutOfRange);    // past the destination window
  EXPECT_EQ(submit({{2, UINT64_MAX, 0}, {0, 0, 0}}), ErrorCode::kOutOfRange);  // offset overflow
  EXPECT_EQ(submit({{100, 0, 0}}), ErrorCode::kInvalidArgument);               // one slice for two targets
  EXPECT_EQ(submit({{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(submit({{0, 0, 0}, {0, 0, 0}}, std::nullopt), ErrorCode::kInvalidArgument);  // nothing to do
  EXPECT_EQ(code_of(engine->submit_prepared(PreparedScatter(), std::vector<ScatterSlice>{}, 1, Completion())),
            ErrorCode::kInvalidArgument);
}

TEST_F(FormsBadInput, PreparedHandlesOfAnotherEngineOrAnUnregisteredSourceAreRefused) {
  Result<PreparedPagedWrites> p = engine->prepare_paged_writes(paged());
  Result<PreparedScatter> s = engine->prepare_scatter(scatter());
  ASSERT_TRUE(p.ok() && s.ok());
  const std::vector<uint32_t> one = {0};
  const std::vector<ScatterSlice> slices = {{16, 0, 0}, {16, 0, 0}};
  Result<TransferId> r = other->submit_prepared(*p, one, one, 1, Completion());
  EXPECT_EQ(code_of(r), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("another engine"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(code_of(other->submit_prepared(*s, slices, 1, Completion())), ErrorCode::kInvalidArgument);

  // Works before the source goes; NotFound after.
  CompletionCounter done;
  ASSERT_TRUE(engine->submit_prepared(*p, one, one, 1, Completion::counter(done)).ok());
  ASSERT_TRUE(engine->submit_prepared(*s, slices, 2, Completion::counter(done)).ok());
  accepted = 2;
  ASSERT_TRUE(done.wait_for(2, std::chrono::seconds(10)));
  EXPECT_EQ(done.errors.load(), 0u);
  ASSERT_TRUE(engine->unregister_memory(handle).ok());
  EXPECT_EQ(code_of(engine->submit_prepared(*p, one, one, 1, Completion())), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(engine->submit_prepared(*s, slices, 1, Completion())), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(engine->prepare_paged_writes(paged())), ErrorCode::kNotFound);
}

TEST_F(FormsBadInput, CancelOfIdsNotInFlightIsNotFound) {
  EXPECT_EQ(code_of(engine->cancel(0)), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(engine->cancel(UINT64_MAX)), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(engine->cancel((uint64_t{1} << 40) << 6)), ErrorCode::kNotFound);  // never issued
  EXPECT_EQ(code_of(engine->cancel((1 << 6) | 5)), ErrorCode::kNotFound);               // group 5 of 1
  CompletionCounter done;
  Result<TransferId> id = engine->submit_write({handle, 0, desc, 0, 4096, 3}, Completion::counter(done));
  ASSERT_TRUE(id.ok());
  accepted = 1;
  ASSERT_TRUE(done.wait_for(1, std::chrono::seconds(10)));
  EXPECT_EQ(code_of(engine->cancel(*id)), ErrorCode::kNotFound);  // completed
  EXPECT_EQ(code_of(other->cancel(*id)), ErrorCode::kNotFound);   // another engine's id
  other->stop();
  EXPECT_EQ(code_of(other->cancel(*id)), ErrorCode::kStopped);
}

TEST_F(FormsBadInput, RepeatingExpectationsAndRegisteredSendsRefuseBadArguments) {
  CompletionCounter c;
  EXPECT_EQ(code_of(engine->imms().expect_every(1, 0, RepeatingSink::counter(c))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->imms().expect_every(1, 1, RepeatingSink())), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->imms().expect_every(1, 1, RepeatingSink::callback({}))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->imms().expect_every(1, 1, RepeatingSink::flag(nullptr))), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(engine->imms().expect_every(1, 2, RepeatingSink::counter(c)).ok());
  EXPECT_EQ(code_of(engine->imms().expect_every(1, 2, RepeatingSink::counter(c))), ErrorCode::kAlreadyExists);
  EXPECT_EQ(code_of(engine->imms().expect(1, 2, Completion::counter(c))), ErrorCode::kAlreadyExists);
  EXPECT_EQ(engine->imms().expected(1), 2u);
  EXPECT_EQ(engine->imms().rounds(1), 0u);
  ASSERT_TRUE(engine->imms().release(1).ok());
  EXPECT_EQ(c.errors.load(), 1u);  // ended once, with Cancelled
  EXPECT_EQ(c.done.load(), 0u);

  // Registered-memory messages: a region of another group, or GPU memory, cannot be used; the
  // region must be registered here.
  auto two_groups = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).groups(2).build();
  ASSERT_TRUE(two_groups.ok()) << two_groups.status().to_string();
  auto g1 = (*two_groups)->register_memory(src.data(), 4096, Access::kLocalOnly, MemoryKind::kHost, 1);
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(code_of((*two_groups)->submit_send(target->main_address(), g1->handle, 0, 16, Completion())),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of((*two_groups)->post_recvs_into(g1->handle, 0, 64, 4, [](std::span<const uint8_t>) {})),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(engine->submit_send(target->main_address(), MrHandle{424242}, 0, 16, Completion())),
            ErrorCode::kNotFound);
  (*two_groups)->stop();
}

}  // namespace
}  // namespace fabric_lib
