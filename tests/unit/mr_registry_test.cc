// MrRegistry: lookups served from the per-thread caches without a lock, and never a region after
// its remove() — also while requests still hold it, on other threads, and across registries
// whose ids coincide.
#include "core/mr_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace fabric_lib::detail {
namespace {

std::shared_ptr<MrEntry> make_entry(uint64_t id, uint64_t length, std::atomic<int>* destroyed = nullptr) {
  return std::shared_ptr<MrEntry>(new MrEntry{id, 0, nullptr, length}, [destroyed](MrEntry* e) {
    if (destroyed) destroyed->fetch_add(1);
    delete e;
  });
}

TEST(MrRegistry, AFoundRegionIsTheInsertedOneAndIsGoneAfterRemoveOnEveryThread) {
  MrRegistry r;
  const uint64_t id = r.next_id();
  r.insert(make_entry(id, 4096));
  ASSERT_TRUE(r.find(MrHandle{id}));
  EXPECT_EQ(r.find(MrHandle{id})->length, 4096u);  // the second lookup comes from the cache
  std::thread([&] { ASSERT_TRUE(r.find(MrHandle{id})); }).join();
  EXPECT_FALSE(r.find(MrHandle{id + 1}));
  ASSERT_TRUE(r.remove(MrHandle{id}));
  EXPECT_FALSE(r.find(MrHandle{id}));
  std::thread([&] { EXPECT_FALSE(r.find(MrHandle{id})); }).join();
  EXPECT_FALSE(r.remove(MrHandle{id}));
}

TEST(MrRegistry, ARemovedRegionThatRequestsStillHoldIsNotFoundFromTheCache) {
  MrRegistry r;
  std::atomic<int> destroyed{0};
  const uint64_t id = r.next_id();
  r.insert(make_entry(id, 64, &destroyed));
  std::shared_ptr<MrEntry> held = r.find(MrHandle{id});  // cached now, and held like a request
  ASSERT_TRUE(held);
  std::shared_ptr<MrEntry> removed = r.remove(MrHandle{id});
  ASSERT_EQ(removed, held);
  EXPECT_TRUE(held->unregistered.load());
  removed.reset();
  EXPECT_FALSE(r.find(MrHandle{id})) << "the cached reference outlived remove()";
  EXPECT_EQ(destroyed.load(), 0);  // the holder keeps it open
  held.reset();
  EXPECT_EQ(destroyed.load(), 1);  // the cache holds no strong reference
}

TEST(MrRegistry, RegistriesWithTheSameIdsDoNotShareCachedRegions) {
  auto a = std::make_unique<MrRegistry>();
  const uint64_t id = a->next_id();
  a->insert(make_entry(id, 111));
  ASSERT_EQ(a->find(MrHandle{id})->length, 111u);
  MrRegistry b;
  ASSERT_EQ(b.next_id(), id);
  b.insert(make_entry(id, 222));
  EXPECT_EQ(b.find(MrHandle{id})->length, 222u);
  EXPECT_EQ(a->find(MrHandle{id})->length, 111u);
  // A registry built where another was destroyed: the old one's cached regions are not its own.
  std::shared_ptr<MrEntry> outlives = a->find(MrHandle{id});
  a.reset();
  ASSERT_FALSE(outlives->unregistered.load());  // alive, never removed: only the instance tells
  auto c = std::make_unique<MrRegistry>();
  EXPECT_FALSE(c->find(MrHandle{id}));
}

TEST(MrRegistry, ClearMarksEveryRegionAndLookupsStopFindingThem) {
  MrRegistry r;
  std::vector<std::shared_ptr<MrEntry>> held;
  for (int i = 0; i < 40; ++i) {
    const uint64_t id = r.next_id();
    r.insert(make_entry(id, 8));
    held.push_back(r.find(MrHandle{id}));
  }
  r.clear();
  for (const auto& e : held) {
    EXPECT_TRUE(e->unregistered.load());
    EXPECT_FALSE(r.find(MrHandle{e->id}));
  }
}

// Threads look up while the main thread registers and removes; after each remove() returns (and
// a flag published with release tells the readers), no reader finds that region again, and each
// region is destroyed exactly once, after its last holder.
TEST(MrRegistry, LookupsRacingRemovesNeverSeeARemovedRegion) {
  MrRegistry r;
  constexpr int kRegions = 200;
  std::atomic<int> destroyed{0};
  std::vector<uint64_t> ids;
  for (int i = 0; i < kRegions; ++i) {
    ids.push_back(r.next_id());
    r.insert(make_entry(ids.back(), 8, &destroyed));
  }
  std::atomic<int> removed_upto{0};  // regions [0, removed_upto) have been removed
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> stale{0}, lookups{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      uint64_t n = t;
      while (!stop.load(std::memory_order_acquire)) {
        const int gone = removed_upto.load(std::memory_order_acquire);
        const int i = static_cast<int>(n++ % kRegions);
        std::shared_ptr<MrEntry> e = r.find(MrHandle{ids[i]});
        lookups.fetch_add(1, std::memory_order_relaxed);
        if (i < gone && e) stale.fetch_add(1);
        if (e && e->id != ids[i]) stale.fetch_add(1);
      }
    });
  }
  // Lets the readers make some lookups (bounded) before the next step.
  auto let_readers_run = [&] {
    const uint64_t target = lookups.load() + 64;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (lookups.load() < target && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  };
  for (int i = 0; i < kRegions; ++i) {
    let_readers_run();
    ASSERT_TRUE(r.remove(MrHandle{ids[i]}));
    removed_upto.store(i + 1, std::memory_order_release);
  }
  let_readers_run();
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(stale.load(), 0u);
  EXPECT_GT(lookups.load(), static_cast<uint64_t>(kRegions));
  EXPECT_EQ(destroyed.load(), kRegions);
}

}  // namespace
}  // namespace fabric_lib::detail
