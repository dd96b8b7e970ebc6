#include "support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fabric_lib::testing {

bool run_command(const std::string& command) {
  const std::string quiet = command + " >/tmp/fabric-lib-netns.log 2>&1";
  if (std::system(quiet.c_str()) == 0) return true;
  std::fprintf(stderr, "command failed: %s\n", command.c_str());
  std::system("cat /tmp/fabric-lib-netns.log >&2");
  return false;
}

bool netns_available(std::string* why) {
  if (geteuid() != 0) {
    *why = "needs root (ip netns, nftables)";
    return false;
  }
  if (std::system("command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1") != 0) {
    *why = "needs the ip and nft commands (iproute2, nftables)";
    return false;
  }
  return true;
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + std::to_string(getpid() % 100000) + "x" + std::to_string(counter.fetch_add(1));
}

NetNamespace::NetNamespace(std::string name) : name_(std::move(name)) {
  ok_ = run_command("ip netns add " + name_) && exec("ip link set lo up");
}

NetNamespace::~NetNamespace() {
  if (!name_.empty()) std::system(("ip netns del " + name_ + " >/dev/null 2>&1").c_str());
}

bool NetNamespace::exec(const std::string& command) const {
  return run_command("ip netns exec " + name_ + " " + command);
}

EnterNamespace::EnterNamespace(const NetNamespace& ns) {
  original_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int target = open(("/run/netns/" + ns.name()).c_str(), O_RDONLY | O_CLOEXEC);
  ok_ = original_ >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0;
  if (target >= 0) close(target);
}

EnterNamespace::~EnterNamespace() {
  if (original_ >= 0) {
    if (setns(original_, CLONE_NEWNET) != 0) std::perror("setns back");
    close(original_);
  }
}

// The kernel reports a veth's carrier with a delay (link watch, up to ~1 s); providers ignore
// interfaces without it, so wait until both ends are operationally up.
static bool wait_operstate_up(const NetNamespace& ns, const std::string& dev) {
  for (int i = 0; i < 100; ++i) {
    if (std::system(("ip -n " + ns.name() + " link show " + dev + " | grep -q 'state UP'").c_str()) == 0) return true;
    usleep(50 * 1000);
  }
  std::fprintf(stderr, "%s in %s never came up\n", dev.c_str(), ns.name().c_str());
  return false;
}

bool add_veth(const NetNamespace& a, const std::string& a_dev, const std::string& a_addr, const NetNamespace& b,
              const std::string& b_dev, const std::string& b_addr) {
  return run_command("ip link add " + a_dev + " netns " + a.name() + " type veth peer name " + b_dev + " netns " +
                     b.name()) &&
         a.exec("ip addr add " + a_addr + "/24 dev " + a_dev) && a.exec("ip link set " + a_dev + " up") &&
         b.exec("ip addr add " + b_addr + "/24 dev " + b_dev) && b.exec("ip link set " + b_dev + " up") &&
         wait_operstate_up(a, a_dev) && wait_operstate_up(b, b_dev);
}

bool cut_link(const NetNamespace& ns, const std::string& dev) {
  const std::string t = "cut_" + dev;
  return ns.exec("nft add table inet " + t) &&
         ns.exec("nft add chain inet " + t + " in '{ type filter hook input priority 0; }'") &&
         ns.exec("nft add chain inet " + t + " out '{ type filter hook output priority 0; }'") &&
         ns.exec("nft add rule inet " + t + " in iifname " + dev + " drop") &&
         ns.exec("nft add rule inet " + t + " out oifname " + dev + " drop");
}

bool restore_link(const NetNamespace& ns, const std::string& dev) { return ns.exec("nft delete table inet cut_" + dev); }

bool add_udp_loss(const NetNamespace& ns, int percent) {
  return ns.exec("nft add table inet loss") &&
         ns.exec("nft add chain inet loss out '{ type filter hook output priority 0; }'") &&
         ns.exec("nft add rule inet loss out meta l4proto udp numgen random mod 100 '<' " + std::to_string(percent) +
                 " counter drop");
}

long udp_loss_dropped(const NetNamespace& ns) {
  const std::string cmd = "ip netns exec " + ns.name() + " nft list table inet loss 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  long dropped = -1;
  while (fgets(line, sizeof(line), p)) {
    const char* at = std::strstr(line, "counter packets ");
    if (at) dropped = std::atol(at + std::strlen("counter packets "));
  }
  pclose(p);
  return dropped;
}

}  // namespace fabric_lib::testing
