// Reading a sysfs tree rooted anywhere (the real /sys, or a fake one a unit test built).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fabric_lib::topology {

class Sysfs {
 public:
  explicit Sysfs(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  // `relative` joined to the root ("bus/pci/devices").
  std::string path(const std::string& relative) const { return root_ + "/" + relative; }
  bool exists(const std::string& relative) const;
  // The file's first line, trimmed; nullopt when unreadable.
  std::optional<std::string> read_line(const std::string& relative) const;
  // Entry names of a directory (not . and ..), sorted; empty when it does not exist.
  std::vector<std::string> list(const std::string& relative) const;
  // The canonical absolute path of `relative` (following symlinks); nullopt when it does not resolve.
  std::optional<std::string> resolve(const std::string& relative) const;

 private:
  std::string root_;
};

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; malformed pieces are skipped.
std::vector<int> parse_cpu_list(const std::string& text);
// Whether `name` looks like a PCI address "dddd:bb:dd.f".
bool is_pci_address(const std::string& name);
// The PCI path of a resolved sysfs device path: the "pciDDDD:BB" host bridge component and every
// PCI address after it ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0" ->
// {"pci0000:00", "0000:00:01.0", "0000:01:00.0"}).
std::vector<std::string> pci_path_of(const std::string& device_path);

}  // namespace fabric_lib::topology
