#include "fabric_bench/output.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

namespace fabric_lib::bench {
namespace {

std::string cell(const std::optional<double>& v, int decimals) {
  if (!v) return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *v);
  return buf;
}

std::string padded(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::string size_cell(const Row& r) {
  if (r.mode == "imm" || r.mode == "imm-raw") return "-";
  if (r.mode.rfind("scatter", 0) == 0 || r.mode.ends_with("-scatter")) return std::to_string(r.size) + " peers";
  if (r.mode.ends_with("-paged")) return std::to_string(r.size) + " pages";
  return format_size(r.size);
}

std::string domains_text(size_t d) { return std::to_string(d) + (d == 1 ? " domain" : " domains"); }

const Row* find_row(const std::vector<Row>& rows, const std::string& mode, size_t domains, uint64_t size) {
  for (const Row& r : rows) {
    if (r.mode == mode && r.domains == domains && r.size == size) return &r;
  }
  return nullptr;
}

// Runs argv (no shell); returns the exit status, or -1. `quiet` sends its output to /dev/null.
int run_program(const std::vector<std::string>& args, bool quiet = false) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;  // before fork: the child makes only async-signal-safe calls until exec
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      const int null_fd = open("/dev/null", O_WRONLY);
      if (null_fd >= 0) {
        dup2(null_fd, 1);
        dup2(null_fd, 2);
      }
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string directory_of_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool file_exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

void print_csv(std::ostream& out, const std::vector<Row>& rows) {
  out << kCsvHeader << "\n";
  for (const Row& r : rows) {
    out << r.mode << ',' << r.provider << ',' << r.domains << ',' << r.size << ',' << cell(r.engine_gbps, 3) << ','
        << cell(r.raw_gbps, 3) << ',' << cell(r.ratio, 3) << ',' << cell(r.engine_mops, 4) << ','
        << cell(r.raw_mops, 4) << ',' << cell(r.p50_us, 2) << ',' << cell(r.p99_us, 2) << "\n";
  }
}

void print_table(std::ostream& out, const std::vector<Row>& rows, const BenchOptions& options) {
  std::string last_group;
  for (const Row& r : rows) {
    const std::string group = r.provider + ", " + domains_text(r.domains);
    if (group != last_group) {
      out << "\n" << group << " (window " << options.window << " requests, at most "
          << format_size(options.max_inflight_bytes) << " in flight; " << options.pages_per_request
          << " pages per paged request; " << format_size(options.scatter_bytes) << " per scatter peer)\n";
      out << padded("mode", 17, true) << padded("size", 10) << padded("engine Gbps", 13) << padded("raw Gbps", 10)
          << padded("ratio", 8) << padded("engine Mops", 13) << padded("raw Mops", 10) << padded("p50 us", 10)
          << padded("p99 us", 10) << "\n";
      last_group = group;
    }
    out << padded(r.mode, 17, true) << padded(size_cell(r), 10) << padded(cell(r.engine_gbps, 2), 13)
        << padded(cell(r.raw_gbps, 2), 10) << padded(r.ratio ? cell(r.ratio, 2) + "x" : "", 8)
        << padded(cell(r.engine_mops, 3), 13) << padded(cell(r.raw_mops, 3), 10) << padded(cell(r.p50_us, 2), 10)
        << padded(cell(r.p99_us, 2), 10) << "\n";
  }
}

void print_domain_scaling(std::ostream& out, const std::vector<Row>& rows) {
  std::set<size_t> domains;
  std::set<uint64_t> sizes;
  for (const Row& r : rows) {
    if (r.mode != "single") continue;
    domains.insert(r.domains);
    sizes.insert(r.size);
  }
  if (domains.size() < 2) return;
  out << "\nDomain scaling: single-write engine Gbps (raw Gbps) by domains per group\n" << padded("size", 10);
  for (size_t d : domains) out << padded(domains_text(d), 22);
  out << "\n";
  for (uint64_t s : sizes) {
    out << padded(format_size(s), 10);
    for (size_t d : domains) {
      const Row* r = find_row(rows, "single", d, s);
      out << padded(r ? cell(r->engine_gbps, 2) + " (" + cell(r->raw_gbps, 2) + ")" : "", 22);
    }
    out << "\n";
  }
}

std::vector<std::string> evaluate_targets(const std::vector<Row>& rows) {
  std::vector<std::string> lines;
  std::set<std::pair<std::string, size_t>> configs;
  for (const Row& r : rows) configs.insert({r.provider, r.domains});
  char buf[512];
  auto verdict = [](bool met, const std::string& miss) { return met ? std::string("met") : "MISSED " + miss; };
  for (const auto& [provider, domains] : configs) {
    const std::string who = "[" + provider + ", " + domains_text(domains) + "] ";
    // 1. single >= 64 KiB: engine >= 0.95x raw.
    const Row* worst = nullptr;
    for (const Row& r : rows) {
      if (r.provider != provider || r.domains != domains || r.mode != "single" || r.size < 65536 || !r.ratio) continue;
      if (!worst || *r.ratio < *worst->ratio) worst = &r;
    }
    if (worst) {
      const double miss = 0.95 - *worst->ratio;
      std::snprintf(buf, sizeof(buf), "single writes >= 64 KiB at >= 0.95x raw: worst %.2fx at %s: %s", *worst->ratio,
                    format_size(worst->size).c_str(), verdict(miss <= 0, "by " + cell(miss, 2)).c_str());
      lines.push_back(who + buf);
    }
    // 2. paged 4 KiB op rate >= 0.95x raw.
    if (const Row* r = find_row(rows, "paged", domains, 4096); r && r->provider == provider && r->engine_mops && r->raw_mops && *r->raw_mops > 0) {
      const double ratio = *r->engine_mops / *r->raw_mops;
      std::snprintf(buf, sizeof(buf), "paged 4 KiB op rate at >= 0.95x raw: %.2fx (%.3f vs %.3f Mops): %s", ratio,
                    *r->engine_mops, *r->raw_mops, verdict(ratio >= 0.95, "by " + cell(0.95 - ratio, 2)).c_str());
      lines.push_back(who + buf);
    }
    // 3. paged reaches 90% of its best bandwidth at <= 32 KiB pages.
    double best = 0;
    for (const Row& r : rows) {
      if (r.provider == provider && r.domains == domains && r.mode == "paged" && r.engine_gbps) best = std::max(best, *r.engine_gbps);
    }
    if (best > 0) {
      uint64_t first = 0;
      for (const Row& r : rows) {
        if (r.provider != provider || r.domains != domains || r.mode != "paged" || !r.engine_gbps) continue;
        if (*r.engine_gbps >= 0.9 * best && (first == 0 || r.size < first)) first = r.size;
      }
      std::snprintf(buf, sizeof(buf), "paged writes reach 90%% of their best %.2f Gbps at <= 32 KiB pages: at %s: %s",
                    best, format_size(first).c_str(), verdict(first <= 32768, "(needs " + format_size(first) + ")").c_str());
      lines.push_back(who + buf);
    }
    // 4. submit-to-first-post p50 < 1 us and p99 < 5 us.
    for (const Row& r : rows) {
      if (r.provider != provider || r.domains != domains || (r.mode != "submit" && r.mode != "submit-progress") ||
          !r.p50_us || !r.p99_us) {
        continue;
      }
      std::snprintf(buf, sizeof(buf), "submit-to-first-post p50 < 1 us, p99 < 5 us (%s writes%s): %.2f / %.2f us: %s",
                    format_size(r.size).c_str(), r.mode == "submit" ? "" : ", progress() reaping", *r.p50_us, *r.p99_us,
                    verdict(*r.p50_us < 1.0 && *r.p99_us < 5.0, "").c_str());
      std::string line = who + buf;
      // The provider's own post call is inside that interval: say how long it takes raw.
      const Row* raw = find_row(rows, "submit-raw", domains, r.size);
      if (raw && raw->provider == provider && raw->p50_us) {
        const double added = *r.p50_us - *raw->p50_us;
        std::snprintf(buf, sizeof(buf), "; the raw fi_writedata call alone p50 %.2f us, so the engine adds p50 %.2f us (< 1 us: %s)",
                      *raw->p50_us, added, verdict(added < 1.0, "").c_str());
        line += buf;
      }
      lines.push_back(line);
    }
    // 5. scatter to 64 peers: posting <= 1.2x the raw loop's, engine work per WR <= 100 ns.
    const Row* post = find_row(rows, "scatter-post", domains, 64);
    const Row* raw_post = find_row(rows, "scatter-post-raw", domains, 64);
    if (post && raw_post && post->provider == provider && post->p50_us && raw_post->p50_us && *raw_post->p50_us > 0) {
      const double ratio = *post->p50_us / *raw_post->p50_us;
      const double per_wr_ns = (*post->p50_us - *raw_post->p50_us) * 1000.0 / 64.0;
      std::snprintf(buf, sizeof(buf),
                    "scatter to 64 peers: posting p50 %.2f us vs raw %.2f us = %.2fx (<= 1.2x): %s; engine work per "
                    "WR %.0f ns (<= 100 ns): %s",
                    *post->p50_us, *raw_post->p50_us, ratio, verdict(ratio <= 1.2, "").c_str(), per_wr_ns,
                    verdict(per_wr_ns <= 100.0, "").c_str());
      lines.push_back(who + buf);
    }
    // 6. imm round trip <= 1.2x raw: the worker seeing the imms, and the app threads polling
    // themselves (progress()).
    const Row* imm_raw = find_row(rows, "imm-raw", domains, 0);
    for (const char* mode : {"imm", "imm-progress"}) {
      const Row* imm = find_row(rows, mode, domains, 0);
      if (!imm || !imm_raw || imm->provider != provider || !imm->p50_us || !imm_raw->p50_us || *imm_raw->p50_us <= 0) continue;
      const double ratio = *imm->p50_us / *imm_raw->p50_us;
      std::snprintf(buf, sizeof(buf), "imm round trip%s p50 %.2f us vs raw %.2f us = %.2fx (<= 1.2x): %s",
                    std::string(mode) == "imm" ? "" : " with progress() on both sides", *imm->p50_us,
                    *imm_raw->p50_us, ratio, verdict(ratio <= 1.2, "").c_str());
      lines.push_back(who + buf);
    }
    // 7. a prepared submit costs the caller less than the plain one (p50 of the call).
    for (const Row& r : rows) {
      if (r.provider != provider || r.domains != domains || r.mode.rfind("prepared-", 0) != 0 || !r.p50_us) continue;
      const std::string what = r.mode.substr(9);
      const Row* plain = find_row(rows, "plain-" + what, domains, r.size);
      if (!plain || plain->provider != provider || !plain->p50_us) continue;
      const std::string point = what == "paged" ? std::to_string(r.size) + "-page paged write"
                                                : "scatter to " + std::to_string(r.size) + " peers";
      std::snprintf(buf, sizeof(buf), "prepared submit < plain (%s, call p50): %.2f us vs %.2f us (%.2fx): %s",
                    point.c_str(), *r.p50_us, *plain->p50_us, *plain->p50_us / std::max(*r.p50_us, 1e-9),
                    verdict(*r.p50_us < *plain->p50_us, "by " + cell(*r.p50_us - *plain->p50_us, 2) + " us").c_str());
      lines.push_back(who + buf);
    }
    // 8. metrics cost at most 2% of the op rate (metrics on / off, measured in this run).
    for (const Row& r : rows) {
      if (r.provider != provider || r.domains != domains || r.mode != "metrics" || !r.ratio) continue;
      std::snprintf(buf, sizeof(buf), "metrics on vs off, op rate >= 0.98x (%s writes): median pair %.3fx (best %.3f vs %.3f Mops): %s",
                    format_size(r.size).c_str(), *r.ratio, r.engine_mops.value_or(0), r.raw_mops.value_or(0),
                    verdict(*r.ratio >= 0.98, "by " + cell(0.98 - *r.ratio, 3)).c_str());
      lines.push_back(who + buf);
    }
  }
  return lines;
}

Status plot_bandwidth(const std::vector<Row>& rows, const std::string& png_path) {
  const std::string dir = directory_of_executable();
  std::string script;
  for (const std::string& candidate : {dir + "/fabric_bench_plot.py", dir + "/../share/fabric_lib/fabric_bench_plot.py"}) {
    if (file_exists(candidate)) {
      script = candidate;
      break;
    }
  }
  if (script.empty()) return not_found("fabric_bench_plot.py not found next to " + dir);
  char tmpl[] = "/tmp/fabric-bench-XXXXXX.csv";
  const int fd = mkstemps(tmpl, 4);
  if (fd < 0) return internal_error("cannot create a temporary CSV");
  close(fd);
  {
    std::ofstream csv(tmpl);
    print_csv(csv, rows);
  }
  // The first interpreter that has matplotlib: $FABRIC_BENCH_PYTHON, python3 on the PATH (a
  // virtualenv may carry it), then Debian's /usr/bin/python3 (python3-matplotlib).
  std::string python;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("FABRIC_BENCH_PYTHON"); env && *env) candidates.push_back(env);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const std::string& c : candidates) {
    if (run_program({c, "-c", "import matplotlib"}, /*quiet=*/true) == 0) {
      python = c;
      break;
    }
  }
  if (python.empty()) {
    std::remove(tmpl);
    return Status(ErrorCode::kUnsupported, "no python3 with matplotlib found (install python3-matplotlib)");
  }
  const int rc = run_program({python, script, tmpl, png_path});
  std::remove(tmpl);
  if (rc != 0) {
    return Status(ErrorCode::kUnsupported, "plotting failed (exit " + std::to_string(rc) + "; needs python3-matplotlib)");
  }
  return ok_status();
}

}  // namespace fabric_lib::bench
