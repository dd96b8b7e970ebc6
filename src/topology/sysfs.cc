#include "topology/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace fabric_lib::topology {

bool Sysfs::exists(const std::string& relative) const {
  struct stat st;
  return stat(path(relative).c_str(), &st) == 0;
}

std::optional<std::string> Sysfs::read_line(const std::string& relative) const {
  std::ifstream in(path(relative));
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) && line.empty()) return std::string();
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  line.erase(line.begin(), std::find_if(line.begin(), line.end(), not_space));
  line.erase(std::find_if(line.rbegin(), line.rend(), not_space).base(), line.end());
  return line;
}

std::vector<std::string> Sysfs::list(const std::string& relative) const {
  std::vector<std::string> names;
  DIR* dir = opendir(path(relative).c_str());
  if (!dir) return names;
  while (dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> Sysfs::resolve(const std::string& relative) const {
  char buf[PATH_MAX];
  if (!realpath(path(relative).c_str(), buf)) return std::nullopt;
  return std::string(buf);
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string piece;
  while (std::getline(in, piece, ',')) {
    if (piece.empty()) continue;
    const size_t dash = piece.find('-');
    try {
      if (dash == std::string::npos) {
        cpus.push_back(std::stoi(piece));
      } else {
        const int lo = std::stoi(piece.substr(0, dash));
        const int hi = std::stoi(piece.substr(dash + 1));
        for (int c = lo; c <= hi && c - lo < 65536; ++c) cpus.push_back(c);
      }
    } catch (...) {
      // not a number: skip the piece
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

bool is_pci_address(const std::string& name) {
  // dddd:bb:dd.f
  if (name.size() != 12 || name[4] != ':' || name[7] != ':' || name[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

std::vector<std::string> pci_path_of(const std::string& device_path) {
  std::vector<std::string> out;
  std::stringstream in(device_path);
  std::string part;
  while (std::getline(in, part, '/')) {
    if (part.rfind("pci", 0) == 0 && part.size() > 3 && part.find(':') != std::string::npos) {
      out.assign(1, part);  // a host bridge starts the path
    } else if (is_pci_address(part) && !out.empty()) {
      out.push_back(part);
    }
  }
  return out;
}

}  // namespace fabric_lib::topology
