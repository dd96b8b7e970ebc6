// gpu::CopyEngineShare: the ipc domains of a group share one copy engine. Each client sees its
// own copies only — their completions (with the ids it gave), its inflight count, its drain —
// while one progress() call issues what every client submitted (one flush a pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "gpu/copy_engine_share.h"

namespace fabric_lib::gpu {
namespace {

// Accepts copies; each progress() issues everything accepted since the last one as one "flush"
// and completes the previous flush's copies (a copy takes one more progress to finish).
class FakeEngine final : public CopyEngine {
 public:
  CopySubmit submit(const CopyRequest& r, Status*) override {
    pending.push_back(r.op);
    return CopySubmit::kAccepted;
  }
  void progress(std::vector<CopyDone>& done) override {
    ++progress_calls;
    for (uint64_t op : running) done.push_back({op, ok_status()});
    running = std::move(pending);
    pending.clear();
    if (!running.empty()) flushes.push_back(running.size());
  }
  size_t inflight() const override { return pending.size() + running.size(); }
  void drain() override {
    pending.clear();
    running.clear();
  }
  std::vector<uint64_t> pending, running;
  std::vector<size_t> flushes;  // how many copies each flush issued
  size_t progress_calls = 0;
};

std::vector<uint64_t> ops_of(const std::vector<CopyDone>& done) {
  std::vector<uint64_t> ops;
  for (const CopyDone& d : done) ops.push_back(d.op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

CopyRequest copy(uint64_t op) {
  CopyRequest r;
  r.op = op;
  r.length = 64;
  return r;
}

TEST(CopyEngineShare, EachClientSeesItsOwnCompletionsUnderItsOwnIds) {
  auto fake = std::make_unique<FakeEngine>();
  FakeEngine& inner = *fake;
  auto share = std::make_shared<CopyEngineShare>(std::move(fake));
  std::unique_ptr<CopyEngine> a = share->client(), b = share->client();
  Status error;
  for (uint64_t op : {1, 2, 3}) ASSERT_EQ(a->submit(copy(op), &error), CopySubmit::kAccepted);
  for (uint64_t op : {1, 7}) ASSERT_EQ(b->submit(copy(op), &error), CopySubmit::kAccepted);  // the same id 1 as a's
  EXPECT_EQ(a->inflight(), 3u);
  EXPECT_EQ(b->inflight(), 2u);

  std::vector<CopyDone> done_a, done_b;
  a->progress(done_a);  // issues both clients' copies in one flush
  EXPECT_TRUE(done_a.empty());
  ASSERT_EQ(inner.flushes, std::vector<size_t>{5}) << "one flush for every client's copies";
  a->progress(done_a);  // they finish: a gets its own three; b's wait for b
  EXPECT_EQ(ops_of(done_a), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(a->inflight(), 0u);
  EXPECT_EQ(b->inflight(), 2u) << "finished, but not yet reported to b";
  b->progress(done_b);
  EXPECT_EQ(ops_of(done_b), (std::vector<uint64_t>{1, 7}));
  EXPECT_EQ(b->inflight(), 0u);
  done_a.clear();
  a->progress(done_a);
  EXPECT_TRUE(done_a.empty()) << "each copy reported once";
}

// The worker polls a group's domains one after another in each pass: the engine runs once per
// pass (the first poll issues and reaps for all), again whenever copies were submitted since it
// last ran, and every time for a client polled alone.
TEST(CopyEngineShare, TheEngineRunsOncePerPassOfTheClients) {
  auto fake = std::make_unique<FakeEngine>();
  FakeEngine& inner = *fake;
  auto share = std::make_shared<CopyEngineShare>(std::move(fake));
  std::unique_ptr<CopyEngine> a = share->client(), b = share->client(), c = share->client();
  Status error;
  std::vector<CopyDone> done_a, done_b, done_c;
  auto pass = [&] {
    a->progress(done_a);
    b->progress(done_b);
    c->progress(done_c);
  };
  pass();
  EXPECT_EQ(inner.progress_calls, 0u) << "nothing in flight, nothing submitted: nothing to ask";

  ASSERT_EQ(a->submit(copy(1), &error), CopySubmit::kAccepted);
  ASSERT_EQ(b->submit(copy(2), &error), CopySubmit::kAccepted);
  pass();  // a's poll issues both copies; b's and c's have nothing new to learn
  EXPECT_EQ(inner.progress_calls, 1u);
  EXPECT_EQ(inner.flushes, std::vector<size_t>{2});
  pass();  // a's poll finds both finished; b's copy reaches b in the same pass
  EXPECT_EQ(inner.progress_calls, 2u);
  EXPECT_EQ(ops_of(done_a), std::vector<uint64_t>{1});
  EXPECT_EQ(ops_of(done_b), std::vector<uint64_t>{2});
  EXPECT_EQ(a->inflight() + b->inflight() + c->inflight(), 0u);

  // A copy submitted after a's poll is issued by the next poll of the same pass.
  ASSERT_EQ(c->submit(copy(3), &error), CopySubmit::kAccepted);
  a->progress(done_a);
  EXPECT_EQ(inner.progress_calls, 3u);
  ASSERT_EQ(c->submit(copy(4), &error), CopySubmit::kAccepted);
  b->progress(done_b);
  EXPECT_EQ(inner.progress_calls, 4u) << "c's new copy must be issued now, not a pass later";
  EXPECT_EQ(inner.flushes, (std::vector<size_t>{2, 1, 1}));
  c->progress(done_c);
  EXPECT_EQ(inner.progress_calls, 4u);

  // c polled alone (the others idle) runs the engine each time until its copies are reported.
  c->progress(done_c);
  EXPECT_EQ(inner.progress_calls, 5u);
  EXPECT_EQ(ops_of(done_c), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(c->inflight(), 0u);
  c->progress(done_c);
  EXPECT_EQ(inner.progress_calls, 5u) << "nothing in flight any more";
}

TEST(CopyEngineShare, DrainWaitsForTheClientsOwnCopiesAndLeavesTheOthers) {
  auto fake = std::make_unique<FakeEngine>();
  auto share = std::make_shared<CopyEngineShare>(std::move(fake));
  std::unique_ptr<CopyEngine> a = share->client(), b = share->client();
  Status error;
  ASSERT_EQ(a->submit(copy(4), &error), CopySubmit::kAccepted);
  ASSERT_EQ(b->submit(copy(5), &error), CopySubmit::kAccepted);
  a->drain();  // runs the engine until a's copy finished; b's finishes too, and stays b's
  EXPECT_EQ(a->inflight(), 0u);
  EXPECT_EQ(b->inflight(), 1u);
  std::vector<CopyDone> done_a, done_b;
  a->progress(done_a);
  EXPECT_TRUE(done_a.empty()) << "a drained copy is not reported";
  b->progress(done_b);
  EXPECT_EQ(ops_of(done_b), std::vector<uint64_t>{5});
}

TEST(CopyEngineShare, AnIdPast48BitsIsRefused) {
  auto share = std::make_shared<CopyEngineShare>(std::make_unique<FakeEngine>());
  std::unique_ptr<CopyEngine> a = share->client();
  Status error;
  EXPECT_EQ(a->submit(copy(uint64_t{1} << 48), &error), CopySubmit::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a->inflight(), 0u);
}

TEST(CopyEngineShare, TheShareLivesAsLongAsItsLastClient) {
  std::weak_ptr<CopyEngineShare> weak;
  std::unique_ptr<CopyEngine> a;
  {
    auto share = std::make_shared<CopyEngineShare>(std::make_unique<FakeEngine>());
    weak = share;
    a = share->client();
  }
  EXPECT_FALSE(weak.expired());
  a.reset();
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace fabric_lib::gpu
