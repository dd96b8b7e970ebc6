// What the kernel says a thread of this process is doing, for tests that must know a thread is
// blocked (inside a wait, or parked) rather than guess it from a sleep.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fabric_lib::testing {

inline pid_t current_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// The state letter of /proc/self/task/<tid>/stat: 'R' running, 'S' sleeping in the kernel (a
// futex, a condition variable, nanosleep), ...; '?' when the thread is gone.
inline char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

// How many threads of this process are named `name` (pthread_setname_np).
inline size_t threads_named(const std::string& name) {
  size_t n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    n += std::getline(comm, line) && line == name;
  }
  return n;
}

}  // namespace fabric_lib::testing
