// SlabPool<T>: the one object pool of the library. Objects live in blocks that are never freed
// while the pool lives, so their addresses stay valid (they travel as WR contexts through
// providers) and steady-state acquire/release allocate nothing. Single-threaded: each pool belongs
// to one thread (a group's worker, or a domain driven by it).
//
// release() of an object that is not in use returns false and changes nothing: providers have
// been seen to report one operation twice, and the caller must then ignore the duplicate.
// Objects also have a dense index (index_of / at) for callers whose ids travel as 32-bit values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace fabric_lib {

template <typename T, size_t kBlock = 256>
class SlabPool {
 public:
  SlabPool() = default;
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  // A value-initialised T.
  T* acquire() {
    if (free_.empty()) grow();
    Slot* s = free_.back();
    free_.pop_back();
    s->value = T{};
    s->in_use = true;
    ++in_use_;
    return &s->value;
  }
  // False (and nothing changes) when `p` is not in use.
  bool release(T* p) {
    Slot* s = slot_of(p);
    if (!s->in_use) return false;
    s->in_use = false;
    free_.push_back(s);
    --in_use_;
    return true;
  }
  bool in_use(const T* p) const { return slot_of(const_cast<T*>(p))->in_use; }
  uint32_t index_of(const T* p) const { return slot_of(const_cast<T*>(p))->index; }
  // The object with index `i`, or null when no object has it or it is not in use.
  T* at(uint32_t i) {
    if (i / kBlock >= blocks_.size()) return nullptr;
    Slot& s = blocks_[i / kBlock][i % kBlock];
    return s.in_use ? &s.value : nullptr;
  }
  size_t in_use() const { return in_use_; }
  size_t capacity() const { return blocks_.size() * kBlock; }

 private:
  struct Slot {
    T value{};  // first member: &slot->value == (T*)slot
    bool in_use = false;
    uint32_t index = 0;
  };
  static Slot* slot_of(T* p) { return reinterpret_cast<Slot*>(p); }
  void grow() {
    const uint32_t first = static_cast<uint32_t>(blocks_.size() * kBlock);
    blocks_.push_back(std::make_unique<Slot[]>(kBlock));
    Slot* block = blocks_.back().get();
    for (size_t i = kBlock; i-- > 0;) {
      block[i].index = first + static_cast<uint32_t>(i);
      free_.push_back(&block[i]);
    }
  }

  std::vector<std::unique_ptr<Slot[]>> blocks_;
  std::vector<Slot*> free_;
  size_t in_use_ = 0;
};

}  // namespace fabric_lib
