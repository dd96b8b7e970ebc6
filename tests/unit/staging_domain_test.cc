// StagingDomain's bookkeeping, without a GPU: a fake inner domain records and completes WRs
// (and "delivers" their bytes into a remote buffer), a fake copy engine copies host memory when
// the test says so. Checked: one completion per accepted write, the imm on exactly one WR posted
// after its siblings completed, the bounded pool, pipelining, failures, peer removal.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "transport/staging/staging_domain.h"

namespace fabric_lib::transport::staging {
namespace {

using transport::DomainInfo;
using transport::DomainMr;
using transport::Event;
using transport::EventKind;
using transport::PeerHandle;
using transport::PostResult;
using transport::RecvWr;
using transport::SendWr;
using transport::WriteWr;

class FakeInner final : public transport::Domain {
 public:
  enum class Cuda { kNoHmem, kAccept, kRefuse };
  explicit FakeInner(Cuda cuda = Cuda::kNoHmem) : cuda_(cuda) {
    info_.provider = "fake";
    info_.max_inflight = 64;
    info_.delivery_complete = true;
    info_.hmem = cuda != Cuda::kNoHmem;
    remote.assign(1 << 16, 0);
  }
  const DomainInfo& info() const override { return info_; }
  const std::vector<uint8_t>& address() const override { return address_; }
  Result<DomainMr> register_memory(void*, size_t, Access, MemoryKind kind) override {
    if (kind == MemoryKind::kCuda && cuda_ == Cuda::kRefuse) return unsupported("fi_mr_regattr: no CUDA in this libfabric");
    DomainMr mr;
    mr.id = ++registered;
    mr.desc = reinterpret_cast<void*>(0x1000 + mr.id);
    return mr;
  }
  void unregister_memory(uint64_t id) override { unregistered.push_back(id); }
  Result<PeerHandle> add_peer(std::span<const uint8_t>) override { return PeerHandle{1}; }
  void remove_peer(PeerHandle peer) override { removed.push_back(peer); }
  PostResult post_write(const WriteWr& wr, Status* error) override {
    if (again > 0) {
      --again;
      return PostResult::kAgain;
    }
    if (fail_posts > 0) {
      --fail_posts;
      *error = Status(ErrorCode::kProviderError, "fake post failure");
      return PostResult::kFailed;
    }
    Posted p{wr, std::vector<uint8_t>(static_cast<const uint8_t*>(wr.src), static_cast<const uint8_t*>(wr.src) + wr.length),
             completed_count};
    posted.push_back(std::move(p));
    return PostResult::kPosted;
  }
  PostResult post_send(const SendWr&, Status*) override { return PostResult::kPosted; }
  PostResult post_recv(const RecvWr&, Status*) override { return PostResult::kPosted; }
  size_t poll(std::vector<Event>& out, size_t max) override {
    size_t n = 0;
    while (n < max && !events.empty()) {
      out.push_back(events.front());
      events.erase(events.begin());
      ++n;
    }
    return n;
  }
  // Completes posted WR i: its bytes land in `remote` first (delivery complete), then the event.
  void complete(size_t i, Status status = {}) {
    Posted& p = posted.at(i);
    ASSERT_FALSE(p.completed);
    p.completed = true;
    ++completed_count;
    if (status.ok()) std::memcpy(remote.data() + p.wr.remote_addr, p.bytes.data(), p.bytes.size());
    Event ev;
    ev.kind = EventKind::kWriteDone;
    ev.context = p.wr.context;
    ev.status = std::move(status);
    events.push_back(ev);
  }
  void complete_all() {
    for (size_t i = 0; i < posted.size(); ++i) {
      if (!posted[i].completed) complete(i);
    }
  }
  size_t imm_wrs() const {
    size_t n = 0;
    for (const Posted& p : posted) n += p.wr.has_imm;
    return n;
  }

  struct Posted {
    WriteWr wr;
    std::vector<uint8_t> bytes;      // the source bytes at post time
    size_t completed_before = 0;     // WRs completed when this one was posted
    bool completed = false;
  };
  DomainInfo info_;
  std::vector<uint8_t> address_{9};
  Cuda cuda_;
  uint64_t registered = 0;
  std::vector<uint64_t> unregistered;
  std::vector<PeerHandle> removed;
  std::vector<Posted> posted;
  std::vector<Event> events;
  std::vector<uint8_t> remote;
  size_t completed_count = 0;
  int again = 0;
  int fail_posts = 0;
};

// The "GPU": malloc'd bounce buffers, and copies that happen (or fail) when the test says so.
// Finished copies are reported once, by the next progress().
class FakeGpu final : public StagingGpu, public gpu::CopyEngine {
 public:
  struct Copy {
    gpu::CopyRequest request;
    bool done = false;
    bool failed = false;
    bool reported = false;
  };
  Result<void*> alloc_pinned(size_t bytes) override {
    ++allocs;
    return std::malloc(bytes);
  }
  void free_pinned(void* p) override {
    if (frees) ++*frees;
    std::free(p);
  }
  Result<int> device_of(const void*) override { return 0; }
  gpu::CopyEngine& copies() override { return *this; }


  gpu::CopySubmit submit(const gpu::CopyRequest& r, Status* error) override {
    if (fail_starts > 0) {
      --fail_starts;
      *error = Status(ErrorCode::kProviderError, "fake copy start failure");
      return gpu::CopySubmit::kFailed;
    }
    if (full) return gpu::CopySubmit::kAgain;
    started.push_back({r});
    return gpu::CopySubmit::kAccepted;
  }
  void progress(std::vector<gpu::CopyDone>& done) override {
    for (Copy& c : started) {
      if (c.reported || (!c.done && !c.failed)) continue;
      c.reported = true;
      done.push_back({c.request.op, c.failed ? Status(ErrorCode::kProviderError, "fake copy failure") : ok_status()});
    }
  }
  size_t inflight() const override {
    size_t n = 0;
    for (const Copy& c : started) n += !c.reported;
    return n;
  }
  void drain() override {}

  // Finishes copy i (performing it).
  void finish(size_t i) {
    Copy& c = started.at(i);
    std::memcpy(c.request.dst_ptr, c.request.src, c.request.length);
    c.done = true;
  }
  void finish_all() {
    for (size_t i = 0; i < started.size(); ++i) {
      if (!started[i].done && !started[i].failed) finish(i);
    }
  }
  size_t pending() const {
    size_t n = 0;
    for (const Copy& c : started) n += !c.done && !c.failed;
    return n;
  }

  std::vector<Copy> started;
  int fail_starts = 0;
  bool full = false;     // submit() answers kAgain
  int allocs = 0;
  int* frees = nullptr;  // outlives the engine (the domain owns it)
};

constexpr uint64_t kChunk = 1024;

struct Fixture {
  explicit Fixture(size_t buffers, FakeInner::Cuda cuda = FakeInner::Cuda::kNoHmem) {
    auto inner_owned = std::make_unique<FakeInner>(cuda);
    inner = inner_owned.get();
    auto copies_owned = std::make_unique<FakeGpu>();
    copies = copies_owned.get();
    copies->frees = &frees;
    auto holder = std::make_shared<std::unique_ptr<StagingGpu>>(std::move(copies_owned));
    StagingGpuFactory factory = [holder]() -> Result<std::unique_ptr<StagingGpu>> {
      if (!*holder) return internal_error("factory called twice");
      return std::move(*holder);
    };
    domain = std::make_unique<StagingDomain>(std::move(inner_owned), factory, StagingDomain::Options{kChunk, buffers});
    gpu.resize(8 * kChunk);
    std::iota(gpu.begin(), gpu.end(), 1);  // the "GPU" source: distinct bytes
  }
  DomainMr staged(Access access = Access::kLocalOnly) {
    Result<DomainMr> mr = domain->register_memory(gpu.data(), gpu.size(), access, MemoryKind::kCuda);
    EXPECT_TRUE(mr.ok()) << mr.status().to_string();
    return mr.ok() ? *mr : DomainMr{};
  }
  WriteWr write(const DomainMr& mr, uint64_t offset, uint64_t length, uint64_t context, std::optional<uint32_t> imm = {},
                PeerHandle peer = 5) {
    WriteWr wr;
    wr.src = gpu.data() + offset;
    wr.length = length;
    wr.src_desc = mr.desc;
    wr.peer = peer;
    wr.remote_addr = 100 + offset;
    wr.rkey = 77;
    wr.has_imm = imm.has_value();
    wr.imm = imm.value_or(0);
    wr.context = context;
    return wr;
  }
  std::vector<Event> poll() {
    std::vector<Event> out;
    domain->poll(out, 64);
    return out;
  }
  bool remote_matches(uint64_t offset, uint64_t length) const {
    return std::memcmp(inner->remote.data() + 100 + offset, gpu.data() + offset, length) == 0;
  }

  int frees = 0;
  FakeInner* inner;
  FakeGpu* copies;
  std::unique_ptr<StagingDomain> domain;
  std::vector<uint8_t> gpu;
};

size_t write_done(const std::vector<Event>& events, uint64_t context) {
  size_t n = 0;
  for (const Event& e : events) n += e.kind == EventKind::kWriteDone && e.context == context;
  return n;
}

TEST(StagingDomain, HostWritesPassThroughUntouched) {
  Fixture f(4);
  std::vector<uint8_t> host(256, 3);
  Result<DomainMr> mr = f.domain->register_memory(host.data(), host.size(), Access::kRemoteWrite, MemoryKind::kHost);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->id & StagingDomain::kStagedIdBit, 0u);
  WriteWr wr;
  wr.src = host.data();
  wr.length = host.size();
  wr.src_desc = mr->desc;
  wr.has_imm = true;
  wr.imm = 9;
  wr.context = 4242;
  Status error;
  EXPECT_EQ(f.domain->post_write(wr, &error), PostResult::kPosted);
  ASSERT_EQ(f.inner->posted.size(), 1u);
  EXPECT_EQ(f.inner->posted[0].wr.context, 4242u);
  EXPECT_EQ(f.inner->posted[0].wr.src, host.data());
  f.inner->complete(0);
  EXPECT_EQ(write_done(f.poll(), 4242), 1u);
  EXPECT_FALSE(f.domain->staging_ready());  // no bounce buffers for host-only use
  EXPECT_EQ(f.copies->allocs, 0);
}

TEST(StagingDomain, GpuRemoteTargetIsRefusedWithTheAlternatives) {
  Fixture f(4);
  Result<DomainMr> remote = f.domain->register_memory(f.gpu.data(), f.gpu.size(), Access::kRemoteWrite, MemoryKind::kCuda);
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(remote.status().message().find("HMEM-capable provider"), std::string::npos) << remote.status().message();
  EXPECT_NE(remote.status().message().find("same-host IPC backend"), std::string::npos);
  EXPECT_NE(remote.status().message().find("fake"), std::string::npos);  // names the provider
  DomainMr local = f.staged();
  EXPECT_NE(local.id & StagingDomain::kStagedIdBit, 0u);
  EXPECT_TRUE(f.domain->staging_ready());
  EXPECT_EQ(f.domain->free_buffers(), 4u);
  f.domain->unregister_memory(local.id);
  EXPECT_TRUE(f.inner->unregistered.empty());  // staged ids never reach the inner domain
}

TEST(StagingDomain, HmemProviderRegistersDirectlyAndFallsBackWhenItCannot) {
  Fixture direct(4, FakeInner::Cuda::kAccept);
  Result<DomainMr> mr = direct.domain->register_memory(direct.gpu.data(), 64, Access::kRemoteWrite, MemoryKind::kCuda);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->id & StagingDomain::kStagedIdBit, 0u);
  EXPECT_FALSE(direct.domain->staging_ready());

  Fixture refusing(4, FakeInner::Cuda::kRefuse);  // FI_HMEM claimed, CUDA missing (Debian's shm)
  DomainMr staged = refusing.staged();
  EXPECT_NE(staged.id & StagingDomain::kStagedIdBit, 0u);
  Result<DomainMr> remote =
      refusing.domain->register_memory(refusing.gpu.data(), 64, Access::kRemoteWrite, MemoryKind::kCuda);
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("no CUDA in this libfabric"), std::string::npos) << remote.status().message();
}

TEST(StagingDomain, SingleChunkWriteCarriesItsImmAfterTheCopy) {
  Fixture f(4);
  DomainMr mr = f.staged();
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 1000, 11, 7u), &error), PostResult::kPosted);
  EXPECT_TRUE(f.inner->posted.empty());  // nothing leaves before its bytes are in host memory
  EXPECT_TRUE(f.domain->has_deferred_work());
  EXPECT_TRUE(f.poll().empty());
  f.copies->finish_all();
  EXPECT_TRUE(f.poll().empty());
  ASSERT_EQ(f.inner->posted.size(), 1u);
  const WriteWr& inner = f.inner->posted[0].wr;
  EXPECT_TRUE(inner.has_imm);
  EXPECT_EQ(inner.imm, 7u);
  EXPECT_EQ(inner.remote_addr, 100u);
  EXPECT_EQ(inner.rkey, 77u);
  EXPECT_EQ(inner.peer, 5u);
  EXPECT_EQ(inner.length, 1000u);
  EXPECT_EQ(std::memcmp(f.inner->posted[0].bytes.data(), f.gpu.data(), 1000), 0);
  EXPECT_FALSE(f.domain->has_deferred_work());
  f.inner->complete(0);
  std::vector<Event> events = f.poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(write_done(events, 11), 1u);
  EXPECT_TRUE(events[0].status.ok());
  EXPECT_TRUE(f.remote_matches(0, 1000));
  EXPECT_EQ(f.domain->staged_writes(), 0u);
  EXPECT_EQ(f.domain->free_buffers(), 4u);
}

TEST(StagingDomain, MultiChunkImmRidesTheLastChunkAfterTheOthersCompleted) {
  Fixture f(4);
  DomainMr mr = f.staged();
  const uint64_t len = 3 * kChunk + 512;
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, len, 12, 3u), &error), PostResult::kPosted);
  f.copies->finish_all();
  f.poll();
  ASSERT_EQ(f.inner->posted.size(), 3u);  // the imm chunk is held back
  EXPECT_EQ(f.inner->imm_wrs(), 0u);
  f.inner->complete(1);
  f.inner->complete(0);
  EXPECT_EQ(write_done(f.poll(), 12), 0u);
  EXPECT_EQ(f.inner->posted.size(), 3u);
  f.inner->complete(2);
  EXPECT_EQ(write_done(f.poll(), 12), 0u);
  ASSERT_EQ(f.inner->posted.size(), 4u);
  const FakeInner::Posted& last = f.inner->posted[3];
  EXPECT_TRUE(last.wr.has_imm);
  EXPECT_EQ(last.wr.imm, 3u);
  EXPECT_EQ(last.wr.remote_addr, 100 + 3 * kChunk);
  EXPECT_EQ(last.wr.length, 512u);
  EXPECT_EQ(last.completed_before, 3u);  // every sibling had completed (delivered) first
  EXPECT_EQ(f.inner->imm_wrs(), 1u);     // one imm per accepted write, as imm_count_of counts
  f.inner->complete(3);
  std::vector<Event> events = f.poll();
  EXPECT_EQ(write_done(events, 12), 1u);
  EXPECT_TRUE(f.remote_matches(0, len));
  EXPECT_TRUE(f.poll().empty());  // exactly once
}

TEST(StagingDomain, CopyOfTheNextChunkOverlapsTheWriteOfThisOne) {
  Fixture f(2);
  DomainMr mr = f.staged();
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 4 * kChunk, 13), &error), PostResult::kPosted);
  EXPECT_EQ(f.copies->started.size(), 2u);  // both buffers copying at once; chunks 2, 3 wait
  f.copies->finish(0);
  f.poll();
  ASSERT_EQ(f.inner->posted.size(), 1u);  // chunk 0 on the wire ...
  EXPECT_EQ(f.copies->pending(), 1u);      // ... while chunk 1 is still being copied
  f.inner->complete(0);
  f.poll();
  EXPECT_EQ(f.copies->started.size(), 3u);  // chunk 0's buffer went straight to chunk 2
  for (int round = 0; round < 10 && write_done(f.poll(), 13) == 0; ++round) {
    EXPECT_LE(f.copies->pending() + (f.inner->posted.size() - f.inner->completed_count), 2u);  // the pool bound
    f.copies->finish_all();
    f.poll();
    f.inner->complete_all();
  }
  EXPECT_EQ(f.inner->posted.size(), 4u);
  EXPECT_TRUE(f.remote_matches(0, 4 * kChunk));
  EXPECT_EQ(f.domain->free_buffers(), 2u);
}

TEST(StagingDomain, ExhaustedPoolSaysAgainButHostTrafficFlows) {
  Fixture f(2);
  DomainMr mr = f.staged();
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 4 * kChunk, 14), &error), PostResult::kPosted);
  EXPECT_EQ(f.domain->post_write(f.write(mr, 4 * kChunk, 100, 15), &error), PostResult::kAgain);
  std::vector<uint8_t> host(64);
  WriteWr plain;
  plain.src = host.data();
  plain.length = host.size();
  plain.context = 16;
  EXPECT_EQ(f.domain->post_write(plain, &error), PostResult::kPosted);  // host writes never wait for bounce buffers
  f.copies->finish_all();
  f.poll();
  f.inner->complete_all();
  EXPECT_EQ(write_done(f.poll(), 16), 1u);
  EXPECT_EQ(f.domain->free_buffers(), 0u);  // chunks 2 and 3 took the freed buffers
  EXPECT_EQ(f.domain->post_write(f.write(mr, 4 * kChunk, 100, 15), &error), PostResult::kAgain);
  f.copies->finish_all();
  f.poll();
  f.inner->complete_all();
  EXPECT_EQ(write_done(f.poll(), 14), 1u);
  EXPECT_EQ(f.domain->free_buffers(), 2u);
  EXPECT_EQ(f.domain->post_write(f.write(mr, 4 * kChunk, 100, 15), &error), PostResult::kPosted);
  f.copies->finish_all();
  f.poll();
  f.inner->complete_all();
  EXPECT_EQ(write_done(f.poll(), 15), 1u);
  EXPECT_EQ(f.domain->staged_writes(), 0u);
  EXPECT_TRUE(f.remote_matches(0, 4 * kChunk));
  EXPECT_TRUE(f.remote_matches(4 * kChunk, 100));
}

TEST(StagingDomain, InnerBackPressureIsRetriedAtPoll) {
  Fixture f(4);
  DomainMr mr = f.staged();
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 2 * kChunk, 17, 1u), &error), PostResult::kPosted);
  f.inner->again = 3;
  f.copies->finish_all();
  f.poll();
  EXPECT_TRUE(f.domain->has_deferred_work());  // chunks wait to be posted: the worker must poll
  for (int i = 0; i < 5; ++i) f.poll();
  ASSERT_EQ(f.inner->posted.size(), 1u);
  f.inner->complete(0);
  f.poll();
  ASSERT_EQ(f.inner->posted.size(), 2u);
  f.inner->complete(1);
  EXPECT_EQ(write_done(f.poll(), 17), 1u);
  EXPECT_EQ(f.inner->imm_wrs(), 1u);
}

TEST(StagingDomain, FailedChunkFailsTheWriteOnceAndItsImmIsNeverSent) {
  Fixture f(4);
  DomainMr mr = f.staged();
  Status error;
  // A completion error on one chunk.
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 3 * kChunk, 18, 5u), &error), PostResult::kPosted);
  f.copies->finish_all();
  f.poll();
  ASSERT_EQ(f.inner->posted.size(), 2u);
  f.inner->complete(0, Status(ErrorCode::kPeerUnreachable, "connection reset"));
  f.inner->complete(1);
  std::vector<Event> events = f.poll();
  ASSERT_EQ(write_done(events, 18), 1u);
  EXPECT_EQ(events[0].status.code(), ErrorCode::kPeerUnreachable);
  EXPECT_EQ(f.inner->imm_wrs(), 0u);
  EXPECT_EQ(f.domain->free_buffers(), 4u);

  // A post that fails.
  f.inner->fail_posts = 1;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 2 * kChunk, 19, 6u), &error), PostResult::kPosted);
  f.copies->finish_all();
  events = f.poll();
  ASSERT_EQ(write_done(events, 19), 1u);
  EXPECT_EQ(events[0].status.code(), ErrorCode::kProviderError);
  EXPECT_EQ(f.inner->imm_wrs(), 0u);

  // A copy that fails to start, and one that fails on the device.
  f.copies->fail_starts = 1;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 100, 20), &error), PostResult::kPosted);
  EXPECT_EQ(write_done(f.poll(), 20), 1u);
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 100, 21, 8u), &error), PostResult::kPosted);
  f.copies->started.back().failed = true;
  events = f.poll();
  ASSERT_EQ(write_done(events, 21), 1u);
  EXPECT_FALSE(events[0].status.ok());
  EXPECT_EQ(f.inner->imm_wrs(), 0u);
  EXPECT_EQ(f.domain->staged_writes(), 0u);
  EXPECT_EQ(f.domain->free_buffers(), 4u);
  EXPECT_TRUE(f.poll().empty());
}

TEST(StagingDomain, RemovedPeerEndsItsWritesAndNothingMoreIsPostedToIt) {
  Fixture f(2);
  DomainMr mr = f.staged();
  Status error;
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 3 * kChunk, 22, 4u, /*peer=*/5), &error), PostResult::kPosted);
  f.copies->finish(0);
  f.poll();
  ASSERT_EQ(f.inner->posted.size(), 1u);  // chunk 0 in flight, chunk 1 copying, chunk 2 waiting
  f.domain->remove_peer(5);
  EXPECT_EQ(f.inner->removed, std::vector<PeerHandle>{5});
  f.copies->finish_all();
  f.poll();
  EXPECT_EQ(f.inner->posted.size(), 1u);  // the copied chunk 1 was dropped, chunk 2 never copied
  f.inner->complete(0);
  std::vector<Event> events = f.poll();
  ASSERT_EQ(write_done(events, 22), 1u);
  EXPECT_EQ(events[0].status.code(), ErrorCode::kPeerUnreachable);
  EXPECT_EQ(f.domain->free_buffers(), 2u);
  // Other peers are unaffected.
  ASSERT_EQ(f.domain->post_write(f.write(mr, 0, 100, 23, 4u, /*peer=*/6), &error), PostResult::kPosted);
  f.copies->finish_all();
  f.poll();
  f.inner->complete_all();
  events = f.poll();
  ASSERT_EQ(write_done(events, 23), 1u);
  EXPECT_TRUE(events[0].status.ok());
}

TEST(StagingDomain, BounceBuffersAreFreedWithTheDomain) {
  Fixture f(2);
  f.staged();
  EXPECT_EQ(f.copies->allocs, 1);
  EXPECT_EQ(f.frees, 0);
  f.domain.reset();
  EXPECT_EQ(f.frees, 1);
}

}  // namespace
}  // namespace fabric_lib::transport::staging
