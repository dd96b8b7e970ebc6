// The one spin-wait hint: tells the core this thread is busy-waiting (x86 `pause`, Arm `yield`),
// which frees pipeline resources for a sibling hyperthread and eases the memory-order machinery.
#pragma once

namespace fabric_lib {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace fabric_lib
