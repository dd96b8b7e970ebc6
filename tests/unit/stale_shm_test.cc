// Stale shm regions left by a dead process that had our pid are removed; our own are kept. (The
// engine-level case — fi_enable's EBUSY, then a retry — needs a real region of a dead process whose
// pid we were given; the suite's own kill -9 tests create those, see LibfabricDomain::open_endpoint.)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "transport/libfabric/stale_shm.h"

namespace fabric_lib {
namespace {

std::string region_path(const std::string& suffix) { return "/dev/shm/" + std::to_string(getpid()) + ":" + suffix; }

bool make_region(const std::string& path, bool old) {
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return false;
  close(fd);
  if (!old) return true;
  timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= 3600;  // an hour before this process started
  times[1] = times[0];
  return utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST(StaleShm, RemovesOnlyRegionsOlderThanThisProcess) {
  // Regions a killed earlier process with this pid really left (the suite's kill -9 tests leave
  // some; pids are reused) go first, so the count below is this test's region alone. (A CI run
  // failed here, 2 instead of 1: /dev/shm held "<pid>:0:0" of an earlier process.)
  transport::libfabric::remove_stale_shm_regions();
  const std::string stale = region_path("97:97"), ours = region_path("97:98");
  ASSERT_TRUE(make_region(stale, true));
  ASSERT_TRUE(make_region(ours, false));
  EXPECT_EQ(transport::libfabric::remove_stale_shm_regions(), 1u);
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(ours));
  unlink(ours.c_str());
  EXPECT_EQ(transport::libfabric::remove_stale_shm_regions(), 0u);
}

}  // namespace
}  // namespace fabric_lib
