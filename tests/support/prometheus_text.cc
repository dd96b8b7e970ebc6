#include "support/prometheus_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

namespace fabric_lib::testing {
namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_label_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_label_char(char c) { return is_label_start(c) || (c >= '0' && c <= '9'); }

bool valid_metric_name(const std::string& s) {
  if (s.empty() || !is_name_start(s[0])) return false;
  for (char c : s) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

// A float as the format defines it (Go's strconv.ParseFloat): decimal or exponent notation, or
// NaN / Inf / Infinity with an optional sign, in any case (prometheus-cpp writes "Nan").
bool parse_number(const std::string& s, double* out) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string unsigned_part = !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (unsigned_part == "inf" || unsigned_part == "infinity") {
    *out = lower[0] == '-' ? -INFINITY : INFINITY;
    return true;
  }
  if (unsigned_part == "nan") {
    *out = NAN;
    return true;
  }
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

struct Cursor {
  const std::string& line;
  size_t pos = 0;
  bool done() const { return pos >= line.size(); }
  char peek() const { return done() ? '\0' : line[pos]; }
};

std::string read_name(Cursor& c, bool label) {
  const size_t start = c.pos;
  if (c.done() || !(label ? is_label_start(c.peek()) : is_name_start(c.peek()))) return "";
  while (!c.done() && (label ? is_label_char(c.peek()) : is_name_char(c.peek()))) ++c.pos;
  return c.line.substr(start, c.pos - start);
}

// Parses `{a="x",b="y"}` (an optional trailing comma allowed by the format).
bool read_labels(Cursor& c, std::map<std::string, std::string>* labels, std::string* why) {
  ++c.pos;  // '{'
  while (true) {
    if (c.peek() == '}') {
      ++c.pos;
      return true;
    }
    const std::string name = read_name(c, true);
    if (name.empty()) return (*why = "bad label name"), false;
    if (name.rfind("__", 0) == 0) return (*why = "reserved label name " + name), false;
    if (c.peek() != '=') return (*why = "no '=' after label " + name), false;
    ++c.pos;
    if (c.peek() != '"') return (*why = "label value of " + name + " not quoted"), false;
    ++c.pos;
    std::string value;
    while (true) {
      if (c.done()) return (*why = "unterminated label value"), false;
      const char ch = c.line[c.pos++];
      if (ch == '"') break;
      if (ch == '\\') {
        if (c.done()) return (*why = "dangling escape"), false;
        const char e = c.line[c.pos++];
        if (e == 'n') {
          value += '\n';
        } else if (e == '\\' || e == '"') {
          value += e;
        } else {
          return (*why = std::string("bad escape \\") + e), false;
        }
        continue;
      }
      value += ch;
    }
    if (!labels->emplace(name, value).second) return (*why = "label " + name + " repeated"), false;
    if (c.peek() == ',') {
      ++c.pos;
    } else if (c.peek() != '}') {
      return (*why = "expected ',' or '}' after a label"), false;
    }
  }
}

std::string series_key(const PromSample& s, const char* skip = nullptr) {
  std::string k = s.name;
  for (const auto& [n, v] : s.labels) {
    if (skip && n == skip) continue;
    k += "\x1f" + n + "=" + v;
  }
  return k;
}

// Histogram rules for one family: per series, le ascending, counts cumulative, +Inf last and
// equal to _count, _sum and _count present.
bool check_histogram(const PromFamily& f, std::string* why) {
  struct Series {
    std::vector<std::pair<double, double>> buckets;
    std::optional<double> count, sum;
  };
  std::map<std::string, Series> series;
  for (const PromSample& s : f.samples) {
    PromSample base = s;
    base.name = f.name;
    if (s.name == f.name + "_bucket") {
      auto le = s.labels.find("le");
      double bound = 0;
      if (le == s.labels.end() || !parse_number(le->second, &bound)) return (*why = f.name + ": bucket without a numeric le"), false;
      series[series_key(base, "le")].buckets.push_back({bound, s.value});
    } else if (s.name == f.name + "_count") {
      series[series_key(base)].count = s.value;
    } else if (s.name == f.name + "_sum") {
      series[series_key(base)].sum = s.value;
    } else {
      return (*why = f.name + ": sample " + s.name + " in a histogram"), false;
    }
  }
  for (const auto& [key, se] : series) {
    if (!se.count || !se.sum) return (*why = f.name + ": a series lacks _count or _sum"), false;
    if (se.buckets.empty() || !std::isinf(se.buckets.back().first)) return (*why = f.name + ": no le=\"+Inf\" bucket last"), false;
    for (size_t i = 1; i < se.buckets.size(); ++i) {
      if (!(se.buckets[i].first > se.buckets[i - 1].first)) return (*why = f.name + ": le not ascending"), false;
      if (se.buckets[i].second < se.buckets[i - 1].second) return (*why = f.name + ": buckets not cumulative"), false;
    }
    if (se.buckets.back().second != *se.count) return (*why = f.name + ": +Inf bucket differs from _count"), false;
  }
  return true;
}

}  // namespace

const PromFamily* PromText::family(const std::string& name) const {
  for (const PromFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::optional<double> PromText::sum(const std::string& name, const std::map<std::string, std::string>& match) const {
  std::optional<double> total;
  for (const PromFamily& f : families) {
    for (const PromSample& s : f.samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        all = all && it != s.labels.end() && it->second == v;
      }
      if (all) total = total.value_or(0) + s.value;
    }
  }
  return total;
}

std::optional<PromText> parse_prometheus_text(const std::string& text, std::string* error) {
  PromText out;
  std::map<std::string, size_t> by_name;  // family name -> index
  std::set<std::string> closed;           // families whose samples ended
  std::set<std::string> series;
  std::string current;                    // the family of the last sample
  if (!text.empty() && text.back() != '\n') return (*error = "the text does not end with a newline"), std::nullopt;
  size_t line_no = 0;
  size_t start = 0;
  auto fail = [&](const std::string& why) {
    *error = "line " + std::to_string(line_no) + ": " + why;
    return std::nullopt;
  };
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      Cursor c{line, 1};
      while (c.peek() == ' ') ++c.pos;
      const size_t kw = c.pos;
      while (!c.done() && c.peek() != ' ') ++c.pos;
      const std::string keyword = line.substr(kw, c.pos - kw);
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a comment
      if (c.peek() != ' ') return fail("no metric name after " + keyword);
      ++c.pos;
      const std::string name = read_name(c, false);
      if (name.empty()) return fail("bad metric name in " + keyword);
      if (!c.done() && c.peek() != ' ') return fail("junk after the name in " + keyword);
      const std::string rest = c.done() ? "" : line.substr(c.pos + 1);
      auto it = by_name.find(name);
      if (it != by_name.end() && closed.count(name)) return fail(keyword + " for " + name + " after its samples");
      if (it == by_name.end()) {
        if (!current.empty()) closed.insert(current);
        current = "";
        it = by_name.emplace(name, out.families.size()).first;
        out.families.push_back({name, "", "", {}});
      }
      PromFamily& f = out.families[it->second];
      if (!f.samples.empty()) return fail(keyword + " for " + name + " after its samples");
      if (keyword == "TYPE") {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
        if (!f.type.empty()) return fail("second TYPE for " + name);
        if (!kTypes.count(rest)) return fail("unknown type '" + rest + "' for " + name);
        f.type = rest;
      } else {
        if (!f.help.empty()) return fail("second HELP for " + name);
        f.help = rest.empty() ? " " : rest;
      }
      continue;
    }
    Cursor c{line, 0};
    PromSample s;
    s.name = read_name(c, false);
    if (s.name.empty()) return fail("a sample line without a valid metric name: " + line);
    if (c.peek() == '{') {
      std::string why;
      if (!read_labels(c, &s.labels, &why)) return fail(why + ": " + line);
    }
    if (c.peek() != ' ') return fail("no space before the value: " + line);
    ++c.pos;
    const size_t value_end = line.find(' ', c.pos);
    const std::string value = line.substr(c.pos, value_end == std::string::npos ? std::string::npos : value_end - c.pos);
    if (!parse_number(value, &s.value)) return fail("bad value '" + value + "'");
    if (value_end != std::string::npos) {  // a timestamp: an integer
      const std::string ts = line.substr(value_end + 1);
      if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string::npos) return fail("bad timestamp '" + ts + "'");
    }
    // Its family: declared under its own name, or a histogram's / summary's suffixed series.
    std::string family = s.name;
    if (!by_name.count(family)) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sfx = suffix;
        if (s.name.size() > sfx.size() && s.name.compare(s.name.size() - sfx.size(), sfx.size(), sfx) == 0) {
          const std::string base = s.name.substr(0, s.name.size() - sfx.size());
          auto it = by_name.find(base);
          if (it != by_name.end()) {
            const std::string& type = out.families[it->second].type;
            if (type == "histogram" || (type == "summary" && sfx != "_bucket")) family = base;
          }
        }
      }
    }
    auto it = by_name.find(family);
    if (it == by_name.end() || out.families[it->second].type.empty()) return fail("sample " + s.name + " has no TYPE line");
    if (closed.count(family)) return fail("samples of " + family + " are not contiguous");
    if (s.labels.count("le") && out.families[it->second].type != "histogram") return fail("le label outside a histogram");
    if (!series.insert(series_key(s)).second) return fail("series repeated: " + line);
    if (!current.empty() && current != family) closed.insert(current);
    current = family;
    out.families[it->second].samples.push_back(std::move(s));
  }
  for (const PromFamily& f : out.families) {
    if (!valid_metric_name(f.name)) return (*error = "bad family name " + f.name), std::nullopt;
    std::string why;
    if (f.type == "histogram" && !check_histogram(f, &why)) return (*error = why), std::nullopt;
    if (f.type == "counter") {
      for (const PromSample& s : f.samples) {
        if (s.value < 0 || std::isnan(s.value)) return (*error = "counter " + s.name + " is negative or NaN"), std::nullopt;
      }
    }
  }
  return out;
}

std::optional<std::string> http_get(const std::string& host_port, const std::string& path, std::string* error,
                                    std::string* content_type) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return (*error = "no port in " + host_port), std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(host_port.c_str() + colon + 1)));
  if (inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return (*error = "not an IPv4 address: " + host_port), std::nullopt;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return (*error = "socket failed"), std::nullopt;
  timeval tv{10, 0};  // bounds a scrape that never answers
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return (*error = "connect to " + host_port + ": " + std::strerror(errno)), std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host_port + "\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return (*error = "send failed"), std::nullopt;
  }
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return (*error = "no HTTP header in the answer"), std::nullopt;
  const std::string head = response.substr(0, head_end);
  std::string body = response.substr(head_end + 4);
  if (head.rfind("HTTP/1.1 200", 0) != 0 && head.rfind("HTTP/1.0 200", 0) != 0) {
    return (*error = "status: " + head.substr(0, head.find('\r'))), std::nullopt;
  }
  std::string lower = head;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (content_type) {
    const size_t ct = lower.find("\r\ncontent-type:");
    *content_type = ct == std::string::npos ? "" : head.substr(ct + 15, head.find('\r', ct + 2) - ct - 15);
  }
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    std::string plain;
    size_t pos = 0;
    while (true) {
      const size_t eol = body.find("\r\n", pos);
      if (eol == std::string::npos) return (*error = "bad chunk"), std::nullopt;
      const size_t len = std::strtoul(body.substr(pos, eol - pos).c_str(), nullptr, 16);
      if (len == 0) break;
      plain += body.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    body = plain;
  } else if (const size_t cl = lower.find("\r\ncontent-length:"); cl != std::string::npos) {
    const size_t len = std::strtoul(head.c_str() + cl + 17, nullptr, 10);
    if (body.size() != len) return (*error = "body of " + std::to_string(body.size()) + " bytes, Content-Length " + std::to_string(len)), std::nullopt;
  }
  return body;
}

}  // namespace fabric_lib::testing
