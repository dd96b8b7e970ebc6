// fabric-bench's results: one Row per measured point, printed as a table or as CSV, checked
// against the targets of the issue, and plotted.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fabric_bench/options.h"
#include "fabric_lib/status.h"

namespace fabric_lib::bench {

// The CSV header, exactly (the smoke tests compare it).
inline constexpr const char* kCsvHeader = "mode,provider,domains,size,engine_gbps,raw_gbps,ratio,engine_mops,raw_mops,p50_us,p99_us";

// One measured point. `size` is the write size (single, submit), the page size (paged), 0 (imm),
// the number of peers (scatter-post, scatter-complete, plain-scatter, prepared-scatter) or of pages
// (plain-paged, prepared-paged). The plain-/prepared- rows hold the submit call's p50/p99; a
// prepared row's ratio is plain p50 / prepared p50. The metrics row (size: the write size) holds
// the engine with metrics on in engine_* and the same engine with metrics off, the baseline, in
// raw_* (best runs of each); its ratio is the median of on / off op rate over back-to-back pairs. Empty optionals print as empty cells.
struct Row {
  std::string mode;  // single, paged, imm, scatter-post, scatter-complete, submit, plain-*/prepared-*, metrics
  std::string provider;
  size_t domains = 1;
  uint64_t size = 0;
  std::optional<double> engine_gbps;
  std::optional<double> raw_gbps;
  std::optional<double> ratio;  // engine / raw (bandwidth; equal to the op-rate ratio)
  std::optional<double> engine_mops;
  std::optional<double> raw_mops;
  std::optional<double> p50_us;
  std::optional<double> p99_us;
};

void print_csv(std::ostream& out, const std::vector<Row>& rows);
void print_table(std::ostream& out, const std::vector<Row>& rows, const BenchOptions& options);
// With more than one domain count: single-write engine bandwidth by size and domain count.
void print_domain_scaling(std::ostream& out, const std::vector<Row>& rows);

// The targets, evaluated on `rows` (one line each; points not measured are skipped).
std::vector<std::string> evaluate_targets(const std::vector<Row>& rows);

// Writes the CSV to a temporary file and runs the plotting script (python3 + matplotlib).
Status plot_bandwidth(const std::vector<Row>& rows, const std::string& png_path);

}  // namespace fabric_lib::bench
