#include "transport/libfabric/stale_shm.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.h"

namespace fabric_lib::transport::libfabric {
namespace {

// This process's start, in seconds since the epoch, rounded down to a clock tick (0 if unknown).
double process_start_epoch() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i) {  // field 22 is starttime
    if (i == 22) start_ticks = std::stoull(field);
  }
  std::ifstream proc_stat("/proc/stat");
  std::string key;
  unsigned long long boot = 0;
  while (proc_stat >> key) {
    if (key == "btime") {
      proc_stat >> boot;
      break;
    }
  }
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (boot == 0 || start_ticks == 0 || ticks_per_second <= 0) return 0;
  return static_cast<double>(boot) + static_cast<double>(start_ticks) / static_cast<double>(ticks_per_second);
}

}  // namespace

size_t remove_stale_shm_regions() {
  const double start = process_start_epoch();
  if (start == 0) return 0;
  const std::string prefix = std::to_string(getpid()) + ":";
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  size_t removed = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string path = "/dev/shm/" + name;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    // The earlier of change and modification time: both are set when the region is created.
    const double changed = static_cast<double>(st.st_ctim.tv_sec) + st.st_ctim.tv_nsec / 1e9;
    const double modified = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
    const double created = std::min(changed, modified);
    // btime has a one-second resolution: keep a second's margin on the side of not removing.
    if (created >= start - 1.0) continue;
    if (unlink(path.c_str()) == 0) {
      ++removed;
      FL_LOG_WARN("removed stale shm region {} left by an earlier process with pid {}", path, getpid());
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace fabric_lib::transport::libfabric
