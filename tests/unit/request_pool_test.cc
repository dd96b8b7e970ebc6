// RequestPool: the request slab behind TransferIds (slot + generation + group), its lock-free
// lookup by slot across chunk boundaries, and what it gives back beyond kMaxFree idle requests.
#include "core/request_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace fabric_lib::detail {
namespace {

TEST(RequestPool, IdsCarryGenerationSlotAndGroup) {
  const TransferId id = RequestPool::make_id(7, 12345, 33);
  const RequestPool::IdParts p = RequestPool::split(id);
  EXPECT_EQ(p.generation, 7u);
  EXPECT_EQ(p.slot, 12345u);
  EXPECT_EQ(p.group, 33u);
  const RequestPool::IdParts top = RequestPool::split(RequestPool::make_id(UINT32_MAX, RequestPool::kMaxSlots - 1, 63));
  EXPECT_EQ(top.generation, UINT32_MAX);
  EXPECT_EQ(top.slot, RequestPool::kMaxSlots - 1);
  EXPECT_EQ(top.group, 63u);
}

TEST(RequestPool, AReturnedRequestComesBackInItsSlotUnderANewGeneration) {
  RequestPool pool;
  Request* a = pool.acquire();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->slot, 0u);
  EXPECT_EQ(a->generation.load(), 1u);
  const TransferId first = RequestPool::make_id(a->generation.load(), a->slot, 2);
  EXPECT_NE(first, 0u);
  EXPECT_TRUE(pool.issued(first));
  EXPECT_FALSE(pool.issued(RequestPool::make_id(2, 0, 2)));  // that generation is still to come
  EXPECT_FALSE(pool.issued(RequestPool::make_id(1, 1, 2)));  // that slot was never handed out
  EXPECT_FALSE(pool.issued(0));
  a->targets.resize(3);
  pool.release(a);
  Request* b = pool.acquire();
  EXPECT_EQ(b, a);
  EXPECT_EQ(b->generation.load(), 2u);
  EXPECT_TRUE(b->targets.empty());  // reset
  EXPECT_GE(b->targets.capacity(), 3u);  // kept: no allocation when it is used again
  EXPECT_TRUE(pool.issued(first));
  EXPECT_TRUE(pool.issued(RequestPool::make_id(2, 0, 2)));
  pool.release(b);
}

TEST(RequestPool, SlotsAreDistinctAndFoundAcrossChunks) {
  RequestPool pool;
  // 64, 128, 256, ... per chunk: 1000 slots span the first four chunks and part of the fifth.
  std::vector<Request*> taken;
  std::set<uint32_t> slots;
  for (int i = 0; i < 1000; ++i) {
    Request* r = pool.acquire();
    ASSERT_NE(r, nullptr);
    taken.push_back(r);
    slots.insert(r->slot);
    EXPECT_EQ(pool.at(r->slot), r) << "slot " << r->slot;
  }
  EXPECT_EQ(slots.size(), 1000u);
  EXPECT_EQ(*slots.rbegin(), 999u);
  EXPECT_EQ(pool.at(1000), &taken[999][1]);  // the rest of the fifth chunk exists, unused
  EXPECT_EQ(pool.at(64 * 31), nullptr);      // the sixth chunk does not
  EXPECT_EQ(pool.at(RequestPool::kMaxSlots), nullptr);
  for (Request* r : taken) pool.release(r);
}

TEST(RequestPool, IdleRequestsBeyondTheCapGiveTheirVectorsBack) {
  RequestPool pool;
  std::vector<Request*> taken;
  for (size_t i = 0; i < RequestPool::kMaxFree + 1; ++i) {
    taken.push_back(pool.acquire());
    taken.back()->src_pages.resize(16);
  }
  for (size_t i = 0; i < RequestPool::kMaxFree; ++i) pool.release(taken[i]);
  Request* last = taken.back();
  pool.release(last);  // kMaxFree are idle already
  EXPECT_EQ(last->src_pages.capacity(), 0u);
  EXPECT_GE(taken.front()->src_pages.capacity(), 16u);
}

}  // namespace
}  // namespace fabric_lib::detail
