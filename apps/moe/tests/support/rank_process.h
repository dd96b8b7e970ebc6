// A moe_rank child process with pipes to its stdin and stdout: line-by-line reads with a
// deadline, kill, and a bounded wait for its exit.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace fabric_lib::moe::testing {

class RankProcess {
 public:
  // Starts `binary` with `args` (argv[1..]). Its stderr goes to the test's stderr.
  RankProcess(const std::string& binary, const std::vector<std::string>& args);
  ~RankProcess();  // kills it if still running
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The next line of its stdout, or nullopt at end of file or when `timeout` passed.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  bool write_line(const std::string& line);
  void kill_now();  // SIGKILL
  // Its exit status (WEXITSTATUS, or 128 + signal), or nullopt if it has not exited in time.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;
  bool eof_ = false;
  std::optional<int> status_;
};

}  // namespace fabric_lib::moe::testing
