// SmallFunction (fabric_lib/small_function.h): what it keeps inline and what on the heap, that
// every callable it takes is constructed and destroyed in pairs through copies, moves and
// assignments, and that it behaves as std::function where the two overlap (empty states, calls).
#include "fabric_lib/small_function.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "fabric_lib/completion.h"

namespace fabric_lib {
namespace {

using IntFn = SmallFunction<int(int)>;

// Counts live instances, so a test sees every copy and move constructed and destroyed.
struct Tracked {
  static inline int live = 0;
  std::array<uint64_t, 4> payload{};  // 32 bytes: inline
  int add = 0;
  explicit Tracked(int a) : add(a) { ++live; }
  Tracked(const Tracked& o) : payload(o.payload), add(o.add) { ++live; }
  Tracked(Tracked&& o) noexcept : payload(o.payload), add(o.add) { ++live; }
  ~Tracked() { --live; }
  int operator()(int x) const { return x + add; }
};

// Too large to stay inline.
struct Big {
  static inline int live = 0;
  std::array<uint64_t, 16> payload{};  // 128 bytes
  int add = 0;
  explicit Big(int a) : add(a) { ++live; }
  Big(const Big& o) : payload(o.payload), add(o.add) { ++live; }
  Big(Big&& o) noexcept : payload(o.payload), add(o.add) { ++live; }
  ~Big() { --live; }
  int operator()(int x) const { return x * add; }
};

// Small, but its move may throw: kept on the heap (an inline one could not move noexcept).
struct ThrowingMove {
  int add = 0;
  explicit ThrowingMove(int a) : add(a) {}
  ThrowingMove(const ThrowingMove&) = default;
  ThrowingMove(ThrowingMove&& o) noexcept(false) : add(o.add) {}
  int operator()(int x) const { return x - add; }
};

TEST(SmallFunction, WhatStaysInline) {
  static_assert(IntFn::kStoresInline<Tracked>);
  static_assert(!IntFn::kStoresInline<Big>);
  static_assert(!IntFn::kStoresInline<ThrowingMove>);
  // The Python binding's callback: three shared_ptrs (48 bytes); std::function keeps 16 inline.
  auto a = std::make_shared<int>(1), b = a, c = a;
  auto three_refs = [a, b, c](const Status&) {};
  static_assert(sizeof(three_refs) == 48);
  static_assert(CompletionCallback::kStoresInline<decltype(three_refs)>);
  static_assert(CompletionCallback::kStoresInline<std::function<void(const Status&)>>);
}

TEST(SmallFunction, EmptyStatesAreAsStdFunction) {
  IntFn none;
  EXPECT_FALSE(none);
  EXPECT_THROW(none(1), std::bad_function_call);
  IntFn null_ptr = nullptr;
  EXPECT_FALSE(null_ptr);
  int (*no_function)(int) = nullptr;
  EXPECT_FALSE(IntFn(no_function));
  EXPECT_FALSE(IntFn(std::function<int(int)>()));
  IntFn f = [](int x) { return x; };
  ASSERT_TRUE(f);
  f = nullptr;
  EXPECT_FALSE(f);
}

int add_one(int x) { return x + 1; }

TEST(SmallFunction, CallsFunctionPointersLambdasAndStdFunctions) {
  EXPECT_EQ(IntFn(add_one)(41), 42);  // a function by name (a reference: no null check, no warning)
  int (*twice)(int) = [](int x) { return 2 * x; };
  EXPECT_EQ(IntFn(twice)(21), 42);
  const int base = 40;
  EXPECT_EQ(IntFn([base](int x) { return base + x; })(2), 42);
  EXPECT_EQ(IntFn(std::function<int(int)>([](int x) { return x + 1; }))(41), 42);
  // A void signature drops a callable's result.
  int seen = 0;
  SmallFunction<void(int)> drop = [&seen](int x) { return seen = x; };
  drop(7);
  EXPECT_EQ(seen, 7);
}

TEST(SmallFunction, AMutableCallableKeepsItsStateBetweenCalls) {
  IntFn counter = [n = 0](int step) mutable { return n += step; };
  EXPECT_EQ(counter(1), 1);
  EXPECT_EQ(counter(2), 3);
  IntFn copy = counter;  // copies the state as it is now
  EXPECT_EQ(copy(10), 13);
  EXPECT_EQ(counter(1), 4);
}

TEST(SmallFunction, InlineCallablesAreConstructedAndDestroyedInPairs) {
  {
    IntFn a = Tracked(1);
    EXPECT_EQ(Tracked::live, 1);
    IntFn b = a;  // copy
    EXPECT_EQ(Tracked::live, 2);
    IntFn c = std::move(a);  // move: a is empty, its callable moved out and destroyed
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty, by contract
    EXPECT_EQ(Tracked::live, 2);
    EXPECT_EQ(b(1), 2);
    EXPECT_EQ(c(2), 3);
    b = c;  // copy assignment over a live one
    EXPECT_EQ(Tracked::live, 2);
    b = std::move(c);  // move assignment over a live one
    EXPECT_EQ(Tracked::live, 1);
    IntFn& same = b;
    b = same;  // self-assignment keeps it
    EXPECT_EQ(b(41), 42);
    b = nullptr;
    EXPECT_EQ(Tracked::live, 0);
    a = Tracked(5);
    EXPECT_EQ(a(1), 6);
  }
  EXPECT_EQ(Tracked::live, 0);
}

TEST(SmallFunction, LargeCallablesLiveOnTheHeapAndChangeHandsOnMove) {
  {
    IntFn a = Big(3);
    EXPECT_EQ(Big::live, 1);
    IntFn b = a;
    EXPECT_EQ(Big::live, 2);
    IntFn c = std::move(a);  // the heap object changes hands: none constructed
    EXPECT_EQ(Big::live, 2);
    EXPECT_EQ(b(2), 6);
    EXPECT_EQ(c(3), 9);
    c = b;
    EXPECT_EQ(Big::live, 2);
    IntFn d = ThrowingMove(1);
    IntFn e = std::move(d);
    EXPECT_EQ(e(43), 42);
  }
  EXPECT_EQ(Big::live, 0);
}

// A callable that forbids taking its address with `&` (std::function accepts it): it must be
// built, kept and destroyed through std::addressof — inline and on the heap.
template <size_t Bytes>
struct NoAddressOf {
  static inline int live = 0;
  std::array<uint8_t, Bytes> payload{};
  NoAddressOf() { ++live; }
  NoAddressOf(const NoAddressOf& o) : payload(o.payload) { ++live; }
  NoAddressOf(NoAddressOf&& o) noexcept : payload(o.payload) { ++live; }
  ~NoAddressOf() { --live; }
  void operator&() const = delete;
  int operator()(int x) const { return x + static_cast<int>(Bytes); }
};

TEST(SmallFunction, CallablesThatForbidTakingTheirAddressAreDestroyed) {
  using Small = NoAddressOf<8>;
  using Large = NoAddressOf<128>;
  static_assert(IntFn::kStoresInline<Small> && !IntFn::kStoresInline<Large>);
  {
    IntFn a = Small();
    IntFn b = Large();
    IntFn c = b;
    EXPECT_EQ(a(1), 9);
    EXPECT_EQ(c(1), 129);
    EXPECT_EQ(Small::live, 1);
    EXPECT_EQ(Large::live, 2);
  }
  EXPECT_EQ(Small::live, 0);
  EXPECT_EQ(Large::live, 0);
}

TEST(SmallFunction, AnEmptySmallFunctionOfAnotherShapeMakesAnEmptyOne) {
  // As std::function<void(int)> from an empty std::function<void(long)>: empty, not a wrapper that
  // throws when called.
  EXPECT_FALSE((SmallFunction<int(int), 48>(SmallFunction<int(int), 32>())));
  EXPECT_FALSE((SmallFunction<int(int)>(SmallFunction<long(long)>())));
  EXPECT_FALSE(CompletionCallback(SmallFunction<void(Status)>()));
  EXPECT_TRUE(Completion::callback(SmallFunction<void(const Status&), 16>()).is_none());
  // A non-empty one is wrapped and called.
  SmallFunction<long(long), 32> narrow = [](long x) { return x * 2; };
  IntFn wide = narrow;
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide(21), 42);
}

// A continuation chain: each step's callable owns the next step. Advancing it assigns the next
// step to the current one, whose callable (the owner of the next step) goes in the assignment.
struct Step {
  std::shared_ptr<IntFn> next;
  int operator()(int x) const { return -x; }
};

TEST(SmallFunction, MoveAssignmentFromAFunctionItsOwnCallableOwns) {
  auto next = std::make_shared<IntFn>([](int x) { return x + 1; });
  IntFn* next_raw = next.get();
  IntFn current = Step{std::move(next)};  // the only owner of *next_raw
  EXPECT_EQ(current(1), -1);
  current = std::move(*next_raw);  // takes the next step before destroying its owner
  ASSERT_TRUE(current);
  EXPECT_EQ(current(41), 42);
}

TEST(SmallFunction, ComparesWithNullptrAndSwaps) {
  IntFn a;
  IntFn b = Tracked(2);
  EXPECT_TRUE(a == nullptr);
  EXPECT_TRUE(nullptr == a);
  EXPECT_TRUE(b != nullptr);
  swap(a, b);
  EXPECT_TRUE(b == nullptr);
  ASSERT_TRUE(a);
  EXPECT_EQ(a(40), 42);
  IntFn c = Big(2);
  a.swap(c);
  EXPECT_EQ(a(21), 42);
  EXPECT_EQ(c(40), 42);
  a.swap(a);
  EXPECT_EQ(a(21), 42);
  EXPECT_EQ(Tracked::live, 1);
  EXPECT_EQ(Big::live, 1);
}

TEST(SmallFunction, CompletionCallbacksTakeStatusByReference) {
  std::string seen;
  CompletionCallback cb = [&seen](const Status& s) { seen = s.ok() ? "ok" : s.message(); };
  Completion c = Completion::callback(cb);  // copied into the completion
  EXPECT_EQ(c.kind(), Completion::Kind::kCallback);
  cb(Status(ErrorCode::kCancelled, "cancelled"));
  EXPECT_EQ(seen, "cancelled");
  EXPECT_TRUE(Completion::callback(nullptr).is_none());
}

}  // namespace
}  // namespace fabric_lib
