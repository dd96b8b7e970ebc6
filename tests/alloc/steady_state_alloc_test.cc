// The hot path's "zero heap allocations per request in steady state" (issue 15), proven: this
// binary replaces the global operator new, counts every allocation made by any thread while a
// window of requests runs, and requires none. Every domain is an InstantDomain
// (support/instant_domain.h): registration and peers go to the real provider, but WRITEs complete
// at the next poll without it, so what is counted is the engine's own path — validation,
// planning, the request slab, posting, WR records, events, metrics and delivery. One thread
// submits and reaps with progress(); the worker thread runs too (and would be counted).
//
// Each form is warmed up first — kWarmupWindow requests held in flight at once (the instant
// domains hold their completions back), then kWarmup requests with kWindow in flight — so that
// slabs, pools, vectors and peers reach their steady size; then kCounted requests run with the
// counter on. The caller's own request objects are built before the counted window (a plain
// paged or scatter request owns vectors; moving it in is free). C code's malloc (libfabric) is
// not counted, but the instant domain keeps the provider off the write path.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/instant_domain.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align = 0) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  if (align > alignof(std::max_align_t)) {
    if (posix_memalign(&p, align, n ? n : 1) != 0) p = nullptr;
  } else {
    p = std::malloc(n ? n : 1);
  }
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace fabric_lib {
namespace {

constexpr uint32_t kPages = 64;
constexpr uint64_t kPage = 4096;
constexpr size_t kWindow = 16;
// Pools are sized by their high-water mark (requests and their plans' capacity, WR records): the
// warm-up first holds this many requests in flight at once (the instant domains hold their
// completions back), more than the counted window can ever reach — a completion is delivered
// just before its request goes back to the pool, so a reaping thread can briefly hold one more.
constexpr size_t kWarmupWindow = 4 * kWindow;
constexpr uint64_t kWarmup = 3000;
constexpr uint64_t kCounted = 3000;

class SteadyStateAllocTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    TransferEngineBuilder builder;
    builder.provider("shm").domains_per_group(GetParam());
    BuilderAccess::set_domain_decorator(builder, [this](std::unique_ptr<transport::Domain> inner) {
      auto d = std::make_unique<testing::InstantDomain>(std::move(inner));
      domains_.push_back(d.get());
      return d;
    });
    Result<std::unique_ptr<TransferEngine>> built = builder.build();
    ASSERT_TRUE(built.ok()) << built.status().to_string();
    engine_ = std::move(built).value();
    src_.assign(kPages * kPage, 1);
    dst_.assign(kPages * kPage, 0);
    Result<MrRegistration> s = engine_->register_memory(src_.data(), src_.size(), Access::kLocalOnly);
    Result<MrRegistration> d = engine_->register_memory(dst_.data(), dst_.size(), Access::kRemoteWrite);
    ASSERT_TRUE(s.ok() && d.ok());
    src_mr_ = *s;
    dst_mr_ = *d;
  }
  void TearDown() override {
    if (engine_) engine_->stop();
  }

  // Runs `total` requests made by `submit(i, completion)` with kWindow in flight, reaping with
  // progress(); the allocations of requests [kWarmup, total) are counted. Returns that count.
  // `sink` makes each request's Completion reporting to `done` (default: the counter itself).
  template <typename Submit>
  uint64_t allocations_of(Submit submit, Completion (*sink)(CompletionCounter&) = &counter_sink) {
    CompletionCounter done;
    uint64_t submitted = 0;
    auto run = [&](uint64_t until, size_t window) -> bool {
      while (done.finished() < until) {
        while (submitted < until && submitted - done.finished() < window) {
          Result<TransferId> id = submit(submitted, sink(done));
          if (!id.ok()) {
            ADD_FAILURE() << "request " << submitted << ": " << id.status().to_string();
            return false;
          }
          ++submitted;
        }
        engine_->progress(256);
      }
      return true;
    };
    // The high-water mark: kWarmupWindow requests alive at once.
    hold(true);
    for (uint64_t i = 0; i < kWarmupWindow; ++i) {
      Result<TransferId> id = submit(submitted, sink(done));
      if (!id.ok()) {
        hold(false);
        ADD_FAILURE() << "warm-up request " << i << ": " << id.status().to_string();
        return UINT64_MAX;
      }
      ++submitted;
    }
    hold(false);
    if (!run(submitted, kWindow) || !run(kWarmup, kWindow)) return UINT64_MAX;
    g_allocations.store(0);
    g_counting.store(true);
    const bool ok = run(kWarmup + kCounted, kWindow);
    g_counting.store(false);
    EXPECT_TRUE(ok);
    EXPECT_EQ(done.errors.load(), 0u);
    EXPECT_EQ(done.finished(), kWarmup + kCounted);
    return g_allocations.load();
  }

  static Completion counter_sink(CompletionCounter& done) { return Completion::counter(done); }
  void hold(bool held) {
    for (testing::InstantDomain* d : domains_) d->hold(held);
  }

  std::vector<testing::InstantDomain*> domains_;  // owned by the engine
  std::unique_ptr<TransferEngine> engine_;
  std::vector<uint8_t> src_, dst_;
  MrRegistration src_mr_, dst_mr_;
};

TEST_P(SteadyStateAllocTest, SingleWritesAllocateNothing) {
  const WriteRequest write{src_mr_.handle, 0, dst_mr_.desc, 0, kPage, 7};
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_write(write, std::move(c)); }), 0u);
}

TEST_P(SteadyStateAllocTest, LargeShardedWritesAllocateNothing) {
  // Sharded over every domain (64 KiB shards).
  const WriteRequest write{src_mr_.handle, 0, dst_mr_.desc, 0, kPages * kPage, 7};
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_write(write, std::move(c)); }), 0u);
}

TEST_P(SteadyStateAllocTest, ImmOnlyWritesAllocateNothing) {
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_imm(9, dst_mr_.desc, std::move(c)); }), 0u);
}

TEST_P(SteadyStateAllocTest, PagedWritesAllocateNothing) {
  // The caller's requests own their page lists: built before the counted window, moved in.
  std::vector<PagedWriteRequest> requests(kWarmup + kCounted);
  for (PagedWriteRequest& r : requests) {
    r.src = src_mr_.handle;
    r.dst = dst_mr_.desc;
    r.page_length = kPage;
    r.src_stride = r.dst_stride = kPage;
    r.imm = 7;
    for (uint32_t i = 0; i < kPages; ++i) {
      r.src_pages.push_back(i);
      r.dst_pages.push_back(kPages - 1 - i);
    }
  }
  EXPECT_EQ(allocations_of([&](uint64_t i, Completion c) { return engine_->submit_paged_writes(std::move(requests[i]), std::move(c)); }),
            0u);
}

TEST_P(SteadyStateAllocTest, AKeptPagedWriteSubmittedAgainAllocatesNothing) {
  // One request, kept by the caller and submitted by const reference every time: its page lists
  // are copied into the recycled request's buffers (a by-value parameter copied them into new ones).
  PagedWriteRequest kept{src_mr_.handle, dst_mr_.desc, kPage, {}, {}, kPage, kPage, 0, 0, 7};
  for (uint32_t i = 0; i < kPages; ++i) {
    kept.src_pages.push_back(i);
    kept.dst_pages.push_back((i * 5) % kPages);
  }
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_paged_writes(kept, std::move(c)); }), 0u);
  EXPECT_EQ(kept.src_pages.size(), kPages);  // still the caller's
}

TEST_P(SteadyStateAllocTest, PreparedPagedWritesAllocateNothing) {
  PagedWriteTemplate t{src_mr_.handle, dst_mr_.desc, kPage, kPage, kPage, 0, 0, kPages, kPages};
  Result<PreparedPagedWrites> prepared = engine_->prepare_paged_writes(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  std::vector<uint32_t> src_pages, dst_pages;
  for (uint32_t i = 0; i < kPages; ++i) {
    src_pages.push_back(i);
    dst_pages.push_back((i * 7) % kPages);
  }
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) {
              return engine_->submit_prepared(*prepared, src_pages, dst_pages, 7, std::move(c));
            }),
            0u);
}

TEST_P(SteadyStateAllocTest, ScattersWithDescriptorsAllocateNothing) {
  std::vector<ScatterRequest> requests(kWarmup + kCounted);
  for (ScatterRequest& r : requests) {
    r.src = src_mr_.handle;
    r.imm = 7;
    for (uint32_t i = 0; i < kPages; ++i) r.targets.push_back({kPage, i * kPage, i * kPage, dst_mr_.desc, 0});
  }
  EXPECT_EQ(allocations_of([&](uint64_t i, Completion c) { return engine_->submit_scatter(std::move(requests[i]), std::move(c)); }), 0u);
}

TEST_P(SteadyStateAllocTest, AKeptScatterSubmittedAgainAllocatesNothing) {
  // One scatter kept by the caller, its targets alternating between the destination's descriptor
  // and a separately decoded copy (equal, another identity: two entries of the request, whose
  // WRs take turns and are grouped by target — group_by_target — on every submit).
  Result<MrDesc> decoded = MrDesc::from_bytes(dst_mr_.desc.to_bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  ScatterRequest kept{src_mr_.handle, {}, 7};
  for (uint32_t i = 0; i < kPages; ++i) kept.targets.push_back({kPage, i * kPage, i * kPage, i % 2 ? *decoded : dst_mr_.desc, 0});
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_scatter(kept, std::move(c)); }), 0u);
  EXPECT_EQ(kept.targets.size(), kPages);
}

TEST_P(SteadyStateAllocTest, GroupScattersAllocateNothing) {
  const MrDesc descs[] = {dst_mr_.desc};
  Result<PeerGroup> group = engine_->add_peer_group(descs);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  std::vector<ScatterRequest> requests(kWarmup + kCounted);
  for (ScatterRequest& r : requests) {
    r.src = src_mr_.handle;
    r.group = &*group;
    r.imm = 7;
    for (uint32_t i = 0; i < kPages; ++i) r.targets.push_back({kPage, i * kPage, i * kPage, MrDesc{}, 0});
  }
  EXPECT_EQ(allocations_of([&](uint64_t i, Completion c) { return engine_->submit_scatter(std::move(requests[i]), std::move(c)); }), 0u);
}

TEST_P(SteadyStateAllocTest, PreparedScattersAllocateNothing) {
  const MrDesc descs[] = {dst_mr_.desc};
  Result<PeerGroup> group = engine_->add_peer_group(descs);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  ScatterTemplate t{src_mr_.handle, &*group, {}};
  for (uint32_t i = 0; i < kPages; ++i) t.targets.push_back({0, i * kPage, kPage, i * kPage, kPage});
  Result<PreparedScatter> prepared = engine_->prepare_scatter(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  const std::vector<ScatterSlice> slices(kPages, ScatterSlice{kPage, 0, 0});
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_prepared(*prepared, slices, 7, std::move(c)); }), 0u);
}

// Callbacks run on the engine's callback thread; the callable travels with the request (a capture
// of up to 48 bytes stays inside the CompletionCallback), and the hand-over to that thread
// allocates nothing either.
TEST_P(SteadyStateAllocTest, CallbacksAllocateNothing) {
  const WriteRequest write{src_mr_.handle, 0, dst_mr_.desc, 0, kPage, 7};
  auto callback_sink = [](CompletionCounter& done) {
    return Completion::callback([&done](const Status& s) {
      (s.ok() ? done.done : done.errors).fetch_add(1, std::memory_order_release);
    });
  };
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_write(write, std::move(c)); }, +callback_sink),
            0u);
}

// A callback as the Python binding makes one per request: three shared references (48 bytes,
// which std::function would have put on the heap).
TEST_P(SteadyStateAllocTest, CallbacksCapturingThreeSharedReferencesAllocateNothing) {
  const WriteRequest write{src_mr_.handle, 0, dst_mr_.desc, 0, kPage, 7};
  static std::shared_ptr<int> first, second;
  first = std::make_shared<int>(1);
  second = std::make_shared<int>(2);
  auto callback_sink = [](CompletionCounter& done) {
    auto counter = std::shared_ptr<CompletionCounter>(std::shared_ptr<CompletionCounter>(), &done);  // aliasing: no allocation
    return Completion::callback([counter, a = first, b = second](const Status& s) {
      (s.ok() ? counter->done : counter->errors).fetch_add(1, std::memory_order_release);
    });
  };
  EXPECT_EQ(allocations_of([&](uint64_t, Completion c) { return engine_->submit_write(write, std::move(c)); }, +callback_sink),
            0u);
}

// The other inline sinks: a GPU-visible flag word and a poll-mode completion queue.
TEST_P(SteadyStateAllocTest, QueueAndFlagSinksAllocateNothing) {
  const WriteRequest write{src_mr_.handle, 0, dst_mr_.desc, 0, kPage, 7};
  CompletionQueue queue;
  uint64_t finished = 0;
  std::vector<CompletionQueue::Entry> entries(64);
  auto drain = [&] {
    finished += queue.poll(entries.data(), entries.size());
  };
  // Warm-up, then the counted window, each request's completion pushed into the queue.
  uint64_t submitted = 0;
  auto run = [&](uint64_t until, size_t window) {
    while (finished < until) {
      while (submitted < until && submitted - finished < window) {
        ASSERT_TRUE(engine_->submit_write(write, Completion::queue(queue, submitted)).ok());
        ++submitted;
      }
      engine_->progress(256);
      drain();
    }
  };
  hold(true);
  for (uint64_t i = 0; i < kWarmupWindow; ++i, ++submitted) {
    ASSERT_TRUE(engine_->submit_write(write, Completion::queue(queue, submitted)).ok());
  }
  hold(false);
  run(kWarmup, kWindow);
  g_allocations.store(0);
  g_counting.store(true);
  run(kWarmup + kCounted, kWindow);
  g_counting.store(false);
  EXPECT_EQ(g_allocations.load(), 0u) << "queue sink";

  uint64_t flag = 0;
  g_allocations.store(0);
  g_counting.store(true);
  for (uint64_t i = 0; i < kCounted; ++i) {
    flag = 0;
    Result<TransferId> id = engine_->submit_write(write, Completion::flag(&flag, i + 1));
    if (!id.ok()) break;
    while (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) == 0) engine_->progress(256);
  }
  g_counting.store(false);
  EXPECT_EQ(flag, kCounted);
  EXPECT_EQ(g_allocations.load(), 0u) << "flag sink";
}

INSTANTIATE_TEST_SUITE_P(Domains, SteadyStateAllocTest, ::testing::Values(1, 4),
                         [](const ::testing::TestParamInfo<size_t>& info) { return std::to_string(info.param) + "dom"; });

}  // namespace
}  // namespace fabric_lib
