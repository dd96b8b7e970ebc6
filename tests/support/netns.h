// Per-test network namespaces for fault injection (root only): veth links between namespaces,
// link cuts and random loss with nftables (this kernel has no tc qdiscs / netem). Traffic stays
// inside the test's own namespaces.
#pragma once

#include <string>
#include <vector>

namespace fabric_lib::testing {

// Whether namespaces can be made here (root, `ip` and `nft` present).
bool netns_available(std::string* why);

// Runs a shell command; true when it exits 0. Output goes to stderr only on failure.
bool run_command(const std::string& command);

// `ip netns add` on construction (with lo up), `ip netns del` on destruction.
class NetNamespace {
 public:
  explicit NetNamespace(std::string name);
  ~NetNamespace();
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;

  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  // Runs `command` inside the namespace.
  bool exec(const std::string& command) const;

 private:
  std::string name_;
  bool ok_ = false;
};

// Moves the calling thread into a namespace for its lifetime (threads and processes it starts
// meanwhile inherit it), then back.
class EnterNamespace {
 public:
  explicit EnterNamespace(const NetNamespace& ns);
  ~EnterNamespace();
  EnterNamespace(const EnterNamespace&) = delete;
  EnterNamespace& operator=(const EnterNamespace&) = delete;
  bool ok() const { return ok_; }

 private:
  int original_ = -1;
  bool ok_ = false;
};

// A veth pair `a_dev` (in a, address a_addr/24) <-> `b_dev` (in b, b_addr/24), both up.
bool add_veth(const NetNamespace& a, const std::string& a_dev, const std::string& a_addr, const NetNamespace& b,
              const std::string& b_dev, const std::string& b_addr);

// nftables in one namespace: drop everything through `dev` (both directions), or restore.
bool cut_link(const NetNamespace& ns, const std::string& dev);
bool restore_link(const NetNamespace& ns, const std::string& dev);
// Drops `percent`% of UDP packets leaving any interface of the namespace, at random.
bool add_udp_loss(const NetNamespace& ns, int percent);
// Packets the loss rule has dropped so far (-1 when it cannot be read).
long udp_loss_dropped(const NetNamespace& ns);

// A short name unique to this process and counter, for namespaces and devices.
std::string unique_name(const std::string& prefix);

}  // namespace fabric_lib::testing
