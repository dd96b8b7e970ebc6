#include <algorithm>
#include <cctype>
#include <cstdio>

#include "fabric_bench/options.h"

namespace fabric_lib::bench {

bool parse_size(const std::string& text, uint64_t* out) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (value > (UINT64_MAX - 9) / 10) return false;
    value = value * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0) return false;
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  unsigned shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kib" || unit == "kb") {
    shift = 10;
  } else if (unit == "m" || unit == "mib" || unit == "mb") {
    shift = 20;
  } else if (unit == "g" || unit == "gib" || unit == "gb") {
    shift = 30;
  } else {
    return false;
  }
  if (shift && value > (UINT64_MAX >> shift)) return false;
  *out = value << shift;
  return true;
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (u < 3 && bytes >= (uint64_t{1024} << (10 * u)) && bytes % (uint64_t{1} << (10 * (u + 1))) == 0) ++u;
  v = static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << (10 * u));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f %s", v, units[u]);
  return buf;
}

std::vector<uint64_t> power_of_two_range(uint64_t min, uint64_t max, unsigned step_shift) {
  std::vector<uint64_t> out;
  for (uint64_t v = min; v <= max && v != 0; v <<= step_shift) out.push_back(v);
  return out;
}

size_t window_for(const BenchOptions& options, uint64_t request_bytes) {
  const uint64_t by_bytes = request_bytes ? options.max_inflight_bytes / request_bytes : options.window;
  return static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(options.window, by_bytes)));
}

size_t points_of(Mode mode, const BenchOptions& options) {
  switch (mode) {
    case Mode::kSingle:
      return options.sizes.size();
    case Mode::kPaged:
      return options.page_sizes.size();
    case Mode::kScatter:
      return options.scatter_peers.size();
    case Mode::kImm:
    case Mode::kSubmit:
    case Mode::kMetrics:
      return 1;
    case Mode::kPrepared:
      return 1 + options.scatter_peers.size();
  }
  return 0;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kSingle:
      return "single";
    case Mode::kPaged:
      return "paged";
    case Mode::kImm:
      return "imm";
    case Mode::kScatter:
      return "scatter";
    case Mode::kSubmit:
      return "submit";
    case Mode::kPrepared:
      return "prepared";
    case Mode::kMetrics:
      return "metrics";
  }
  return "?";
}

}  // namespace fabric_lib::bench
