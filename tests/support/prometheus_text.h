// A strict reader of the Prometheus text exposition format (version 0.0.4), for tests that check
// what the metrics endpoint serves: every line must be a HELP, TYPE or comment line or a sample
// with a valid name, valid and unique label names, properly escaped values and a number; a
// family's TYPE and HELP come once and before its samples, its samples are contiguous, no series
// repeats, and histograms have cumulative buckets ending in le="+Inf" equal to their _count.
// Plus a minimal HTTP/1.1 GET over TCP to fetch it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fabric_lib::testing {

struct PromSample {
  std::string name;                           // as written (with _bucket/_sum/_count)
  std::map<std::string, std::string> labels;  // unescaped
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<PromSample> samples;
};

struct PromText {
  std::vector<PromFamily> families;
  // The sum of the values of samples named `name` whose labels include all of `match`; nullopt
  // when none matches.
  std::optional<double> sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
  const PromFamily* family(const std::string& name) const;
};

// Parses `text`; on the first violation returns nullopt and sets *error to "line N: what".
std::optional<PromText> parse_prometheus_text(const std::string& text, std::string* error);

// GET http://host:port<path>; the body when the status is 200, else nullopt (reason in *error).
std::optional<std::string> http_get(const std::string& host_port, const std::string& path, std::string* error,
                                    std::string* content_type = nullptr);

}  // namespace fabric_lib::testing
