// fabric-bench: the paper's Figures 7-8 measurements (single and paged WRITE bandwidth, imm round
// trips, scatter posting, submit overhead, prepared vs plain submits, metrics on vs off) on any libfabric provider, against a raw fi_writedata
// loop on the same provider in the same run.
//
//   fabric-bench --local [options]               starts its own target process on this host
//   fabric-bench --server [--listen :18515]      target for an initiator on another host
//   fabric-bench --connect HOST:18515 [options]  initiator against such a server
#include <algorithm>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "fabric_bench/initiator.h"
#include "fabric_bench/modes.h"
#include "fabric_bench/ipc_bench.h"
#include "fabric_bench/output.h"
#include "fabric_bench/peer_link.h"
#include "fabric_bench/target.h"

using namespace fabric_lib;
using namespace fabric_lib::bench;

namespace {

constexpr const char* kDefaultPort = "18515";

// A comma-separated list of sizes ("1KiB,64KiB,1MiB").
bool parse_size_list(const std::string& text, std::vector<uint64_t>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t v = 0;
    if (!parse_size(item, &v) || v == 0) return false;
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

bool parse_modes(const std::string& text, std::vector<Mode>* out) {
  const std::map<std::string, Mode> names = {{"single", Mode::kSingle},
                                             {"paged", Mode::kPaged},
                                             {"imm", Mode::kImm},
                                             {"scatter", Mode::kScatter},
                                             {"submit", Mode::kSubmit},
                                             {"prepared", Mode::kPrepared},
                                             {"metrics", Mode::kMetrics}};
  out->clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "all") {
      *out = {Mode::kSingle, Mode::kPaged, Mode::kImm, Mode::kSubmit, Mode::kScatter, Mode::kPrepared, Mode::kMetrics};
      continue;
    }
    auto it = names.find(item);
    if (it == names.end()) return false;
    out->push_back(it->second);
  }
  // Whatever order they were named in, the modes with a raw baseline into the target's raw
  // endpoint (single, paged, imm, submit) run before scatter: on libfabric 1.17's shm, a raw write
  // into that endpoint after the scatter mode's raw loop had written into the scatter peers'
  // engines (other endpoints of the same target process) crashed the target inside fi_cq_read.
  std::stable_sort(out->begin(), out->end(), [](Mode a, Mode b) {
    auto rank = [](Mode m) { return m == Mode::kScatter ? 1 : (m == Mode::kPrepared || m == Mode::kMetrics ? 2 : 0); };
    return rank(a) < rank(b);
  });
  return !out->empty();
}

Status run_configuration(const BenchOptions& o, PeerLink& peer, size_t domains, Progress& progress,
                         std::vector<Row>& rows, uint64_t* verified) {
  EngineConfig config;
  config.provider = o.provider;
  config.domains = domains;
  config.interface_name = o.interface_name;
  config.spin = o.spin;
  config.trust = o.trust_provider_calls;
  Initiator init(o, peer, config, progress);
  FABRIC_LIB_RETURN_IF_ERROR(init.start());
  progress.note("provider " + init.provider() + ", " + std::to_string(domains) + " domain(s), interface " +
                (o.interface_name.empty() ? "(provider default)" : o.interface_name));
  for (Mode m : o.modes) {
    Status s;
    switch (m) {
      case Mode::kSingle:
        s = run_single_mode(init, rows);
        break;
      case Mode::kPaged:
        s = run_paged_mode(init, rows);
        break;
      case Mode::kImm:
        s = run_imm_mode(init, rows);
        break;
      case Mode::kScatter:
        s = run_scatter_mode(init, rows);
        break;
      case Mode::kSubmit:
        s = run_submit_mode(init, rows);
        break;
      case Mode::kPrepared:
        s = run_prepared_mode(init, rows);
        break;
      case Mode::kMetrics:
        s = run_metrics_mode(init, rows);
        break;
    }
    if (!s.ok()) return Status(s.code(), std::string(mode_name(m)) + " mode: " + s.message());
  }
  *verified += init.verified();
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  bool local = false, server = false, quick = false, quiet = false;
  std::string connect, listen = std::string(":") + kDefaultPort, modes = "all";
  std::string sizes_text, pages_text, peers_text, scatter_bytes = "4KiB", submit_bytes = "4KiB",
                                                  max_region = "256MiB";
  std::vector<size_t> domains = {1};
  int serve_fd = -1;

  CLI::App app{"fabric-bench: fabric-lib bandwidth and latency vs raw libfabric, measured in the same run"};
  // A later occurrence wins, so wrappers (scripts/demo.sh) can set defaults the user overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("--local", local, "start the target process on this host (loopback)");
  app.add_flag("--server", server, "be the target for an initiator on another host");
  app.add_option("--listen", listen, "server: [HOST]:PORT to listen on")->capture_default_str();
  app.add_option("--connect", connect, "initiator: HOST:PORT of a fabric-bench --server");
  app.add_option("--mode", modes, "single,paged,imm,scatter,submit,prepared,metrics or all")->capture_default_str();
  app.add_option("--provider", o.provider,
                 "libfabric provider (tcp, shm, udp;ofi_rxd, efa, verbs;ofi_rxm, ...), or ipc (GPU to GPU on this host, "
                 "against cudaMemcpyPeerAsync; --local only)")
      ->capture_default_str();
  app.add_option("--domains", domains, "domains (NICs) per group; a list runs one sweep each, e.g. 1,2,4")
      ->delimiter(',')
      ->check(CLI::Range(1, 16));
  app.add_option("--interface", o.interface_name,
                 "domain/interface name (default: lo for socket providers with --local, else the provider's)");
  app.add_option("--duration", o.duration_s, "seconds per timed run (engine or raw) of each point")->capture_default_str();
  app.add_option("--iterations", o.iterations, "requests per timed run instead of --duration");
  app.add_option("--repeats", o.repeats, "alternating engine/raw runs per point; the best of each counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--window", o.window, "requests in flight (single, paged)")->capture_default_str()->check(CLI::Range(1, 4096));
  std::string inflight_bytes = "64MiB";
  app.add_option("--max-inflight", inflight_bytes, "caps the window at this many bytes in flight")->capture_default_str();
  app.add_option("--sizes", sizes_text, "single-write sizes (default 1KiB..64MiB, x4 steps)");
  app.add_option("--max-shards", o.max_shards,
                 "single writes' route: RoundRobin{N}, at most N domains a write (0: the engine's default; on ipc the "
                 "default posts a write's shards from one domain, N = --domains splits them as libfabric domains do)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app.add_option("--pin-domain", o.pin_domain,
                 "ipc: single and paged writes all from this domain (route Pinned{D}; -1: as --max-shards says), to "
                 "compare N domains with one in the same group")
      ->capture_default_str()
      ->check(CLI::Range(-1, 15));
  app.add_option("--page-sizes", pages_text, "paged page sizes (default 1KiB..64KiB, x2 steps)");
  app.add_option("--pages-per-request", o.pages_per_request, "pages per paged request")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--scatter-peers", peers_text, "peer counts of the scatter sweep (default 1,2,4,...,64)");
  app.add_option("--scatter-bytes", scatter_bytes, "bytes written to each scatter peer")->capture_default_str();
  app.add_option("--submit-bytes", submit_bytes, "write size of the submit and metrics modes")->capture_default_str();
  app.add_option("--latency-iterations", o.latency_iterations, "samples per latency point (imm, scatter, submit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--max-region", max_region, "largest region each side registers")->capture_default_str();
  app.add_flag("--spin", o.spin,
               "initiator engine busy-polls (IdlePolicy::kSpin) instead of adaptive; needs spare cores (an idle "
               "spinning engine also slows the raw runs)");
  app.add_flag("--trust-provider-calls", o.trust_provider_calls,
               "both sides' engines post and poll on application threads on shm too "
               "(TransferEngineBuilder::trust_provider_calls; off: only the worker calls shm)");
  app.add_flag("--target-spin", o.target_spin,
               "target engines busy-poll too (as the raw target does during raw runs); needs spare cores");
  app.add_option("--drive", o.drive,
                 "single/paged: 'callback' (completion callbacks submit the next request) or 'poll' (the caller "
                 "submits and reaps its completions with TransferEngine::progress())")
      ->capture_default_str()
      ->check(CLI::IsMember({"callback", "poll"}));
  app.add_option("--format", o.format, "table or csv")->capture_default_str()->check(CLI::IsMember({"table", "csv"}));
  app.add_option("--plot", o.plot_file, "also draw bandwidth vs size into this PNG (python3-matplotlib)");
  app.add_option("--csv", o.csv_file, "also write the CSV to this file");
  app.add_flag("--quick", quick, "tiny sweep for smoke tests (explicit options still win)");
  app.add_flag("--quiet", quiet, "no progress lines on stderr");
  app.add_option("--only", o.only, "single/paged: run only the engine or only the raw baseline (for profiling)")
      ->check(CLI::IsMember({"engine", "raw"}));
  app.add_option("--seed", o.seed, "pattern and permutation seed")->capture_default_str();
  app.add_option("--copy-modes", o.ipc_copy_modes, "ipc: also run paged writes with each GPU copy mode (memcpy,batch,kernel)")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "memcpy", "batch", "kernel"}));
  app.add_option("--serve-fd", serve_fd, "internal: serve as a local target on this socket")->group("");
  CLI11_PARSE(app, argc, argv);

  if (serve_fd >= 0 && o.provider == "ipc") return serve_ipc_target(tools::ControlChannel(serve_fd));
  if (serve_fd >= 0) return serve_target(tools::ControlChannel(serve_fd), "");
  if (server) {
    Result<tools::ControlChannel> channel = accept_one(listen, true);
    if (!channel.ok()) {
      std::fprintf(stderr, "fabric-bench: %s\n", channel.status().to_string().c_str());
      return 1;
    }
    return serve_target(std::move(channel).value(), o.interface_name);
  }
  if (local == !connect.empty()) {
    std::fprintf(stderr, "fabric-bench: give exactly one of --local, --connect HOST:PORT or --server\n%s",
                 app.help().c_str());
    return 2;
  }

  // Defaults, the --quick preset, then explicit lists.
  o.sizes = power_of_two_range(1 << 10, 64 << 20, 2);
  o.page_sizes = power_of_two_range(1 << 10, 64 << 10, 1);
  o.scatter_peers = {1, 2, 4, 8, 16, 32, 64};
  if (quick) {
    o.sizes = {4 << 10, 64 << 10, 1 << 20};
    o.page_sizes = {1 << 10, 4 << 10};
    o.scatter_peers = {1, 4};
    if (!app.count("--pages-per-request")) o.pages_per_request = 16;
    if (!app.count("--window")) o.window = 8;
    if (!app.count("--latency-iterations")) o.latency_iterations = 50;
    if (!app.count("--iterations") && !app.count("--duration")) o.iterations = 64;
  }
  auto fail_usage = [&](const std::string& what) {
    std::fprintf(stderr, "fabric-bench: bad %s\n", what.c_str());
    return 2;
  };
  if (!parse_modes(modes, &o.modes)) return fail_usage("--mode '" + modes + "'");
  if (!sizes_text.empty() && !parse_size_list(sizes_text, &o.sizes)) return fail_usage("--sizes");
  if (!pages_text.empty() && !parse_size_list(pages_text, &o.page_sizes)) return fail_usage("--page-sizes");
  if (!peers_text.empty()) {
    std::vector<uint64_t> peers;
    if (!parse_size_list(peers_text, &peers)) return fail_usage("--scatter-peers");
    o.scatter_peers.assign(peers.begin(), peers.end());
    for (size_t p : o.scatter_peers) {
      if (p > 256) return fail_usage("--scatter-peers (at most 256)");
    }
  }
  if (!parse_size(scatter_bytes, &o.scatter_bytes) || o.scatter_bytes == 0) return fail_usage("--scatter-bytes");
  if (!parse_size(submit_bytes, &o.submit_bytes) || o.submit_bytes == 0) return fail_usage("--submit-bytes");
  if (!parse_size(max_region, &o.max_region_bytes) || o.max_region_bytes < 4096) return fail_usage("--max-region");
  if (!parse_size(inflight_bytes, &o.max_inflight_bytes) || o.max_inflight_bytes == 0) return fail_usage("--max-inflight");
  if (!(o.duration_s > 0) && o.iterations == 0) return fail_usage("--duration (or give --iterations)");
  o.domains = domains;
  o.progress = !quiet;
  const bool socket_provider = o.provider.rfind("tcp", 0) == 0 || o.provider.rfind("udp", 0) == 0 ||
                               o.provider.rfind("sockets", 0) == 0;
  if (local && !app.count("--interface") && socket_provider) o.interface_name = "lo";

  if (o.pin_domain >= 0 && o.provider != "ipc") return fail_usage("--pin-domain (ipc only)");
  for (size_t d : o.domains) {
    if (o.pin_domain >= 0 && static_cast<size_t>(o.pin_domain) >= d) return fail_usage("--pin-domain (below every --domains)");
  }
  if (o.provider == "ipc") {  // same-host GPU transfers: their own sweep (ipc_bench.h)
    if (!local) return fail_usage("--provider ipc: ipc connects processes of one host; use --local");
    return run_ipc_bench(o, argv[0]);
  }

  size_t points = 0;
  for (Mode m : o.modes) points += points_of(m, o);
  Progress progress(o.progress, points * o.domains.size());

  Result<PeerLink> peer = local ? spawn_local_peer(argv[0], {}) : connect_to_server(connect, std::chrono::seconds(30));
  if (!peer.ok()) {
    std::fprintf(stderr, "fabric-bench: %s\n", peer.status().to_string().c_str());
    return 1;
  }
  std::vector<Row> rows;
  uint64_t verified = 0;
  Status status;
  for (size_t d : o.domains) {
    status = run_configuration(o, *peer, d, progress, rows, &verified);
    if (!status.ok()) break;
  }
  const bool peer_ok = peer->finish();

  if (o.format == "csv") {
    print_csv(std::cout, rows);
  } else {
    print_table(std::cout, rows, o);
    print_domain_scaling(std::cout, rows);
    const std::vector<std::string> targets = evaluate_targets(rows);
    if (!targets.empty()) std::cout << "\nTargets (engine/raw ratios measured in this run):\n";
    for (const std::string& line : targets) std::cout << "  " << line << "\n";
  }
  std::cout.flush();
  if (!o.csv_file.empty()) {
    std::ofstream csv(o.csv_file);
    print_csv(csv, rows);
    if (!csv) std::fprintf(stderr, "fabric-bench: cannot write %s\n", o.csv_file.c_str());
  }
  if (!o.plot_file.empty() && status.ok()) {
    Status plotted = plot_bandwidth(rows, o.plot_file);
    if (!plotted.ok()) std::fprintf(stderr, "fabric-bench: %s\n", plotted.to_string().c_str());
    else progress.note("plot written to " + o.plot_file);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "fabric-bench: FAILED: %s\n", status.to_string().c_str());
    return 1;
  }
  if (!peer_ok) {
    std::fprintf(stderr, "fabric-bench: the target process did not exit cleanly\n");
    return 1;
  }
  std::fprintf(stderr, "fabric-bench: verification passed: %llu full iterations checked at the target (bytes and imm counts)\n",
               static_cast<unsigned long long>(verified));
  return 0;
}
