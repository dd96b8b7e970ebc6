// SmallFunction: a copyable callable wrapper, as std::function, with room for a larger capture
// inline.
//
// Why: a completion callback travels with its request (fabric_lib/completion.h), and one made per
// request must not cost a heap allocation. libstdc++'s std::function keeps only 16 bytes inline —
// a lambda capturing a shared_ptr and one more word already goes to the heap (the Python
// binding's callbacks hold three references: 48 bytes). SmallFunction keeps callables of up to
// `InlineBytes` inline (those that move without throwing); larger ones go to the heap, as with
// std::function.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace fabric_lib {

template <typename Signature, size_t InlineBytes = 48>
class SmallFunction;

template <typename R, typename... Args, size_t InlineBytes>
class SmallFunction<R(Args...), InlineBytes> {
  static_assert(InlineBytes >= sizeof(void*), "a callable kept on the heap leaves its pointer in the inline buffer");

 public:
  // Whether a callable of type F is kept inline (constructing from it allocates nothing).
  template <typename F>
  static constexpr bool kStoresInline = sizeof(F) <= InlineBytes && alignof(F) <= alignof(std::max_align_t) &&
                                        std::is_nothrow_move_constructible_v<F>;

  SmallFunction() noexcept = default;
  SmallFunction(std::nullptr_t) noexcept {}  // NOLINT: as std::function
  // Any copyable callable with this signature. A null function pointer, an empty std::function or
  // an empty SmallFunction of another signature or size makes an empty SmallFunction, as
  // std::function does.
  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, SmallFunction> && std::is_copy_constructible_v<D> &&
                                        std::is_invocable_r_v<R, D&, Args...>>>
  SmallFunction(F&& f) {  // NOLINT: converts implicitly, as std::function
    // (Not for a function passed by name: F is then a reference to it, never null.)
    using Given = std::remove_reference_t<F>;
    if constexpr (std::is_pointer_v<Given> || std::is_member_pointer_v<Given> || may_be_empty<D>::value) {
      if (!f) return;
    }
    if constexpr (kStoresInline<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
    } else {
      ::new (static_cast<void*>(buf_)) D*(new D(std::forward<F>(f)));
    }
    ops_ = &kOps<D>;
  }
  SmallFunction(const SmallFunction& other) {
    if (other.ops_) other.ops_->copy(buf_, other.buf_);
    ops_ = other.ops_;
  }
  SmallFunction(SmallFunction&& other) noexcept { take(other); }
  SmallFunction& operator=(const SmallFunction& other) {
    if (this != &other) *this = SmallFunction(other);
    return *this;
  }
  SmallFunction& operator=(SmallFunction&& other) noexcept {
    // `other` may belong to the callable this one holds (a chain of continuations): take it
    // before that callable is destroyed. Also makes self-assignment a no-op.
    SmallFunction taken(std::move(other));
    reset();
    take(taken);
    return *this;
  }
  SmallFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  ~SmallFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  friend bool operator==(const SmallFunction& f, std::nullptr_t) noexcept { return !f; }
  void swap(SmallFunction& other) noexcept {
    SmallFunction taken(std::move(other));
    other.take(*this);
    take(taken);
  }
  friend void swap(SmallFunction& a, SmallFunction& b) noexcept { a.swap(b); }
  // Calls the callable (throws std::bad_function_call when empty, as std::function). Like
  // std::function, a callable whose call operator is not const (a `mutable` lambda) may change
  // its own state.
  R operator()(Args... args) const {
    if (!ops_) throw std::bad_function_call();
    return ops_->invoke(buf_, std::forward<Args>(args)...);
  }

 private:
  // Wrappers that may be empty (then this one is empty too).
  template <typename T>
  struct may_be_empty : std::false_type {};
  template <typename S>
  struct may_be_empty<std::function<S>> : std::true_type {};
  template <typename S, size_t N>
  struct may_be_empty<SmallFunction<S, N>> : std::true_type {};

  struct Ops {
    R (*invoke)(void* storage, Args&&... args);
    void (*copy)(void* dst, const void* src);
    void (*move)(void* dst, void* src) noexcept;  // constructs dst from src, then destroys src
    void (*destroy)(void* storage) noexcept;
  };
  template <typename D>
  static D& target(void* storage) noexcept {
    if constexpr (kStoresInline<D>) {
      return *std::launder(static_cast<D*>(storage));
    } else {
      return **std::launder(static_cast<D**>(storage));
    }
  }
  template <typename D>
  static constexpr Ops kOps = {
      [](void* s, Args&&... args) -> R {
        if constexpr (std::is_void_v<R>) {
          std::invoke(target<D>(s), std::forward<Args>(args)...);  // a result, if any, is dropped
        } else {
          return std::invoke(target<D>(s), std::forward<Args>(args)...);
        }
      },
      [](void* dst, const void* src) {
        const D& from = target<D>(const_cast<void*>(src));
        if constexpr (kStoresInline<D>) {
          ::new (dst) D(from);
        } else {
          ::new (dst) D*(new D(from));
        }
      },
      [](void* dst, void* src) noexcept {
        if constexpr (kStoresInline<D>) {
          D& from = target<D>(src);
          ::new (dst) D(std::move(from));
          from.~D();
        } else {
          ::new (dst) D*(*std::launder(static_cast<D**>(src)));  // the heap object changes hands
        }
      },
      [](void* s) noexcept {
        if constexpr (kStoresInline<D>) {
          target<D>(s).~D();
        } else {
          delete std::addressof(target<D>(s));  // not `&`: D may overload it
        }
      },
  };

  void take(SmallFunction& other) noexcept {
    if (other.ops_) other.ops_->move(buf_, other.buf_);
    ops_ = std::exchange(other.ops_, nullptr);
  }
  void reset() noexcept {
    if (ops_) std::exchange(ops_, nullptr)->destroy(buf_);
  }

  // mutable: a call through a const SmallFunction may change the callable's state, as with
  // std::function (a `mutable` lambda).
  alignas(std::max_align_t) mutable unsigned char buf_[InlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace fabric_lib
