// Who a process is on this host, as the ipc domain needs it: the host's boot id (two processes
// with the same boot id run on the same host, under the same kernel), the PID namespace (pids only
// mean something inside one), the pid and the process's start time (a pid alone may be reused).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>

#include "fabric_lib/status.h"

namespace fabric_lib::transport::ipc {

using BootId = std::array<uint8_t, 16>;

struct ProcessIdentity {
  BootId boot_id{};
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid
  uint32_t pid = 0;
  uint64_t start_time = 0;     // field 22 of /proc/<pid>/stat (clock ticks since boot)
};

// This process (read once, then cached; pid and start time are re-read after a fork).
Result<ProcessIdentity> self_identity();

// Parses a boot id as the kernel prints it ("be44a2a9-0099-4d52-ada8-2554b0f00892").
Result<BootId> parse_boot_id(const std::string& text);
std::string boot_id_text(const BootId& id);

// The start time of process `pid`, or an error when it does not exist (or is a zombie: it has
// exited and only waits to be reaped).
Result<uint64_t> process_start_time(uint32_t pid);

// True while process `pid` runs and is the one that started at `start_time`.
bool process_alive(uint32_t pid, uint64_t start_time);

// A cheap way to watch a process: a pidfd (Linux 5.3+) for `pid` if it still is the process that
// started at `start_time`, else -1 (no pidfd support, or the process is gone). The caller closes it.
int open_process_watch(uint32_t pid, uint64_t start_time);
// Whether the process behind a watch has exited (one non-blocking poll).
bool watched_process_exited(int watch_fd);

}  // namespace fabric_lib::transport::ipc
