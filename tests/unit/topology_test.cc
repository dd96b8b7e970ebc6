// Topology detection and grouping against sysfs trees built in a temporary directory: a p5-like
// machine (8 GPUs, 32 EFA NICs, two GPUs and eight NICs per PCIe switch, 2 NUMA nodes with
// hyperthreads), a ConnectX-7 machine with one NIC per GPU switch plus a storage NIC elsewhere,
// a flattened VM layout (everything on the root complex), and a machine with neither GPU nor NIC.
// Also the TransferEngineBuilder::from_topology() mapping, on a real engine over tcp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fabric_lib/topology.h"
#include "fabric_lib/fabric_lib.h"
#include "topology/devices.h"
#include "topology/sysfs.h"

namespace fabric_lib {
namespace {

namespace fs = std::filesystem;

// A fake sysfs: PCI functions under devices/<host bridge>/<ports...>/<function> with the
// bus/pci/devices symlinks, class/infiniband entries and NUMA/CPU files.
class FakeSysfs {
 public:
  FakeSysfs() {
    char tmpl[] = "/tmp/fabric-topology-XXXXXX";
    root_ = mkdtemp(tmpl);
    fs::create_directories(root_ + "/bus/pci/devices");
    fs::create_directories(root_ + "/devices/system/node");
    fs::create_directories(root_ + "/devices/system/cpu");
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  const std::string& root() const { return root_; }

  // `chain` = the PCI addresses from the root port down to the function itself.
  void add_function(const std::string& host_bridge, const std::vector<std::string>& chain, uint32_t vendor,
                    uint32_t pci_class, int numa) {
    std::string rel = "devices/" + host_bridge;
    for (const std::string& bdf : chain) {
      rel += "/" + bdf;
      fs::create_directories(root_ + "/" + rel);
      const std::string link = root_ + "/bus/pci/devices/" + bdf;
      if (!fs::exists(link)) {  // bridges get bridge attributes, like the real thing
        fs::create_directory_symlink("../../../" + rel, link);
        write(rel + "/vendor", hex(0x8086, 4));
        write(rel + "/class", hex(0x060400, 6));
        write(rel + "/numa_node", std::to_string(numa));
      }
    }
    write(rel + "/vendor", hex(vendor, 4));
    write(rel + "/class", hex(pci_class, 6));
    write(rel + "/device", hex(0x2330, 4));
    write(rel + "/numa_node", std::to_string(numa));
  }
  void add_infiniband(const std::string& name, const std::string& bdf) {
    fs::create_directories(root_ + "/class/infiniband/" + name);
    fs::create_directory_symlink(fs::canonical(root_ + "/bus/pci/devices/" + bdf),
                                 root_ + "/class/infiniband/" + name + "/device");
  }
  void add_numa_node(int node, const std::string& cpulist) {
    write("devices/system/node/node" + std::to_string(node) + "/cpulist", cpulist);
  }
  void set_siblings(int cpu, const std::string& list) {
    write("devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list", list);
  }

 private:
  static std::string hex(uint32_t v, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%0*x", digits, v);
    return buf;
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel) << text << "\n";
  }
  std::string root_;
};

constexpr uint32_t kNvidia = 0x10de, kAmazon = 0x1d0f, kMellanox = 0x15b3;
constexpr uint32_t k3dController = 0x030200, kEthernet = 0x020000, kInfiniband = 0x020700;

std::string bdf(int bus, int device = 0, int function = 0) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0000:%02x:%02x.%x", bus, device, function);
  return buf;
}

Topology detect(const FakeSysfs& sysfs) {
  TopologyOptions options;
  options.sysfs_root = sysfs.root();
  options.providers = {};  // libfabric's view is tested separately (merge_fabric_nics)
  Result<Topology> t = detect_topology(options);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Topology();
}

// Two NUMA nodes of 24 cores with hyperthreads: node n has cores n*24.. and siblings +48.
void add_two_socket_cpus(FakeSysfs& sysfs) {
  sysfs.add_numa_node(0, "0-23,48-71");
  sysfs.add_numa_node(1, "24-47,72-95");
  for (int c = 0; c < 48; ++c) {
    const std::string list = std::to_string(c) + "," + std::to_string(c + 48);
    sysfs.set_siblings(c, list);
    sysfs.set_siblings(c + 48, list);
  }
}

// p5-like: 4 PCIe switches (2 per NUMA node), each with 2 GPUs and 8 EFA NICs.
void build_p5(FakeSysfs& sysfs) {
  add_two_socket_cpus(sysfs);
  for (int s = 0; s < 4; ++s) {
    const int numa = s / 2;
    const std::string hb = "pci0000:" + bdf(s * 0x20).substr(5, 2);
    const int base = s * 0x20;
    const std::vector<std::string> up = {bdf(base, 1), bdf(base + 1)};  // root port, switch upstream port
    int port = 0;
    auto below = [&](int bus) {
      std::vector<std::string> chain = up;
      chain.push_back(bdf(base + 2, port++));  // a downstream port per endpoint
      chain.push_back(bdf(bus));
      return chain;
    };
    for (int g = 0; g < 2; ++g) sysfs.add_function(hb, below(base + 3 + g), kNvidia, k3dController, numa);
    for (int n = 0; n < 8; ++n) {
      const int bus = base + 5 + n;
      sysfs.add_function(hb, below(bus), kAmazon, kEthernet, numa);
      sysfs.add_infiniband("rdmap" + std::to_string(bus) + "s0", bdf(bus));
    }
  }
}

TEST(TopologyTest, P5EightGpusFourEfaEach) {
  FakeSysfs sysfs;
  build_p5(sysfs);
  const Topology t = detect(sysfs);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 32u);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[0].physical_cores.size(), 24u);
  ASSERT_EQ(t.groups.size(), 8u);
  std::set<size_t> used_nics;
  std::set<int> workers;
  for (size_t g = 0; g < 8; ++g) {
    const DeviceGroup& group = t.groups[g];
    ASSERT_TRUE(group.gpu.has_value());
    EXPECT_EQ(*group.gpu, g);
    // Four NICs each, all under the GPU's own switch (same host bridge and upstream port).
    ASSERT_EQ(group.nics.size(), 4u) << t.describe();
    for (size_t n : group.nics) {
      EXPECT_TRUE(used_nics.insert(n).second) << "NIC " << n << " in two groups";
      EXPECT_EQ(t.nics[n].pci_path[2], t.gpus[g].pci_path[2]) << t.describe();
    }
    // The two GPUs of a switch split its eight NICs in PCI order: the first GPU the first four.
    const int switch_base = static_cast<int>(g / 2) * 0x20;
    const int first_bus = switch_base + 5 + static_cast<int>(g % 2) * 4;
    EXPECT_EQ(t.nics[group.nics[0]].pci_address, bdf(first_bus));
    EXPECT_EQ(t.group_interfaces(g)[0], "rdmap" + std::to_string(first_bus) + "s0");
    // NUMA-local physical cores, none shared, CPU 0 left to the OS.
    EXPECT_EQ(group.numa_node, static_cast<int>(g / 4));
    ASSERT_GE(group.cpus.size(), 2u);
    EXPECT_NE(group.worker_cpu, group.watcher_cpu);
    for (int cpu : {group.worker_cpu, group.watcher_cpu}) {
      EXPECT_LT(cpu, 48) << "a hyperthread sibling was handed out";
      EXPECT_EQ(cpu / 24, group.numa_node);
      EXPECT_NE(cpu, 0);
    }
    EXPECT_TRUE(workers.insert(group.worker_cpu).second);
  }
}

// DGX-like ConnectX-7: each GPU's switch holds one NIC; a storage NIC hangs off another root port
// and must not be given to any GPU.
TEST(TopologyTest, ConnectX7OneNicPerGpu) {
  FakeSysfs sysfs;
  add_two_socket_cpus(sysfs);
  for (int s = 0; s < 8; ++s) {
    const int numa = s / 4;
    const int base = s * 0x10;
    const std::string hb = numa == 0 ? "pci0000:00" : "pci0000:80";
    const std::vector<std::string> up = {bdf(numa * 0x80, 1 + s % 4), bdf(base + 1)};
    sysfs.add_function(hb, {up[0], up[1], bdf(base + 2, 0), bdf(base + 3)}, kNvidia, k3dController, numa);
    sysfs.add_function(hb, {up[0], up[1], bdf(base + 2, 1), bdf(base + 4)}, kMellanox, kInfiniband, numa);
    sysfs.add_infiniband("mlx5_" + std::to_string(s), bdf(base + 4));
  }
  sysfs.add_function("pci0000:00", {bdf(0, 8), bdf(0x7e)}, kMellanox, kEthernet, 0);
  sysfs.add_infiniband("mlx5_8", bdf(0x7e));

  const Topology t = detect(sysfs);
  ASSERT_EQ(t.gpus.size(), 8u);
  ASSERT_EQ(t.nics.size(), 9u);
  ASSERT_EQ(t.groups.size(), 8u);
  for (size_t g = 0; g < 8; ++g) {
    EXPECT_EQ(t.group_interfaces(g), std::vector<std::string>{"mlx5_" + std::to_string(g)}) << t.describe();
    EXPECT_EQ(t.groups[g].numa_node, static_cast<int>(g / 4));
  }
}

// A VM that shows every device on the root complex: grouping falls back to NUMA locality.
TEST(TopologyTest, FlatLayoutFallsBackToNuma) {
  FakeSysfs sysfs;
  add_two_socket_cpus(sysfs);
  for (int i = 0; i < 2; ++i) {
    sysfs.add_function("pci0000:00", {bdf(0, 0x10 + i)}, kNvidia, k3dController, 0);
    sysfs.add_function("pci0000:00", {bdf(0, 0x18 + i)}, kNvidia, k3dController, 1);
  }
  for (int i = 0; i < 4; ++i) {
    sysfs.add_function("pci0000:00", {bdf(0, 0x20 + i)}, kAmazon, kEthernet, i < 2 ? 0 : 1);
    sysfs.add_infiniband("efa" + std::to_string(i), bdf(0, 0x20 + i));
  }
  const Topology t = detect(sysfs);
  ASSERT_EQ(t.groups.size(), 4u);
  EXPECT_EQ(t.group_interfaces(0), std::vector<std::string>{"efa0"});
  EXPECT_EQ(t.group_interfaces(1), std::vector<std::string>{"efa1"});
  EXPECT_EQ(t.group_interfaces(2), std::vector<std::string>{"efa2"});
  EXPECT_EQ(t.group_interfaces(3), std::vector<std::string>{"efa3"});
}

// Fewer NICs than GPUs under one switch: the GPUs share them rather than going without.
TEST(TopologyTest, GpusShareScarceNics) {
  FakeSysfs sysfs;
  sysfs.add_numa_node(0, "0-7");
  const std::vector<std::string> up = {bdf(0, 1), bdf(1)};
  for (int g = 0; g < 4; ++g) sysfs.add_function("pci0000:00", {up[0], up[1], bdf(2, g), bdf(3 + g)}, kNvidia, k3dController, 0);
  for (int n = 0; n < 2; ++n) {
    sysfs.add_function("pci0000:00", {up[0], up[1], bdf(2, 8 + n), bdf(9 + n)}, kMellanox, kInfiniband, 0);
    sysfs.add_infiniband("mlx5_" + std::to_string(n), bdf(9 + n));
  }
  const Topology t = detect(sysfs);
  ASSERT_EQ(t.groups.size(), 4u);
  EXPECT_EQ(t.group_interfaces(0), std::vector<std::string>{"mlx5_0"});
  EXPECT_EQ(t.group_interfaces(1), std::vector<std::string>{"mlx5_0"});
  EXPECT_EQ(t.group_interfaces(2), std::vector<std::string>{"mlx5_1"});
  EXPECT_EQ(t.group_interfaces(3), std::vector<std::string>{"mlx5_1"});
  // 8 cores (no sibling files: each CPU is a core), 4 groups: two each, CPU 0 kept (not > 2 per group).
  EXPECT_EQ(t.groups[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.groups[3].cpus, (std::vector<int>{6, 7}));
}

TEST(TopologyTest, NoGpuNoNicGivesOneHostGroup) {
  FakeSysfs sysfs;
  sysfs.add_numa_node(0, "0-3");
  sysfs.add_function("pci0000:00", {bdf(0, 3)}, 0x8086, kEthernet, -1);  // a plain Ethernet NIC
  const Topology t = detect(sysfs);
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_TRUE(t.nics.empty());
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_FALSE(t.groups[0].gpu.has_value());
  EXPECT_TRUE(t.groups[0].nics.empty());
  EXPECT_EQ(t.groups[0].cpus, (std::vector<int>{1, 2, 3}));  // CPU 0 left alone (4 > 2 per group)
  EXPECT_EQ(t.groups[0].worker_cpu, 1);
}

// Missing NUMA information: one node with the online CPUs.
TEST(TopologyTest, NoNumaDirectoryUsesOnlineCpus) {
  FakeSysfs sysfs;
  fs::remove_all(sysfs.root() + "/devices/system/node");
  std::ofstream(sysfs.root() + "/devices/system/cpu/online") << "0-1\n";
  const Topology t = detect(sysfs);
  ASSERT_EQ(t.numa_nodes.size(), 1u);
  EXPECT_EQ(t.numa_nodes[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.groups[0].worker_cpu, 0);
}

TEST(TopologyTest, MissingRootIsAnError) {
  TopologyOptions options;
  options.sysfs_root = "/nonexistent/fabric-lib-sysfs";
  EXPECT_EQ(detect_topology(options).status().code(), ErrorCode::kNotFound);
}

// libfabric names NICs by domain ("rdmap16s27-rdm" for EFA): the domain name is what the engine
// is given, matched to the sysfs device by PCI address or by name.
TEST(TopologyTest, LibfabricDomainNamesTheNic) {
  FakeSysfs sysfs;
  build_p5(sysfs);
  topology::Sysfs reader(sysfs.root());
  std::vector<NicDevice> nics = topology::scan_infiniband(reader);
  ASSERT_EQ(nics.size(), 32u);
  std::vector<topology::FabricNic> fabric = {
      {"efa", "rdmap5s0-rdm", "", ""},                 // by name prefix
      {"efa", "whatever-rdm", "", bdf(6)},              // by PCI address
      {"verbs", "rdmap5s0", "", ""},                    // a later provider does not rename it
      {"verbs", "mlx5_9", "mlx5_9", ""},                // unknown to sysfs: a new NIC
  };
  topology::merge_fabric_nics(reader, fabric, nics);
  ASSERT_EQ(nics.size(), 33u);
  auto find = [&](const std::string& name) -> const NicDevice* {
    for (const NicDevice& n : nics) {
      if (n.name == name) return &n;
    }
    return nullptr;
  };
  ASSERT_NE(find("rdmap5s0"), nullptr);
  EXPECT_EQ(find("rdmap5s0")->interface_name(), "rdmap5s0-rdm");
  EXPECT_EQ(find("rdmap5s0")->provider, "efa");
  EXPECT_EQ(find("rdmap6s0")->interface_name(), "whatever-rdm");
  EXPECT_EQ(find("rdmap7s0")->interface_name(), "rdmap7s0");
  ASSERT_NE(find("mlx5_9"), nullptr);
  EXPECT_EQ(find("mlx5_9")->provider, "verbs");
}

TEST(TopologyTest, SysfsHelpers) {
  EXPECT_EQ(topology::parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(topology::parse_cpu_list("junk,2"), (std::vector<int>{2}));
  EXPECT_TRUE(topology::parse_cpu_list("").empty());
  EXPECT_TRUE(topology::is_pci_address("0000:53:00.0"));
  EXPECT_FALSE(topology::is_pci_address("pci0000:00"));
  EXPECT_EQ(topology::pci_path_of("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
            (std::vector<std::string>{"pci0000:00", "0000:00:01.0", "0000:01:00.0"}));
}

// from_topology: one group per topology group, N domains each, the group's NICs and worker CPU.
TEST(TopologyTest, BuilderFromTopology) {
  unsetenv("FABRIC_LIB_PROVIDER");
  Topology t;
  t.nics.push_back({"lo", "", "", "", -1, {}});
  for (int g = 0; g < 2; ++g) {
    DeviceGroup group;
    group.nics = {0};
    group.worker_cpu = static_cast<int>(g % sysconf(_SC_NPROCESSORS_ONLN));
    t.groups.push_back(group);
  }
  Result<std::unique_ptr<TransferEngine>> engine = TransferEngineBuilder().provider("tcp").from_topology(t, 2).build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->num_groups(), 2u);
  EXPECT_EQ((*engine)->num_domains(), 2u);
  (*engine)->stop();

  // A host group without NICs keeps interfaces(); nets_per_gpu 0 = the smallest NIC count (1).
  Topology host;
  host.groups.push_back(DeviceGroup{});
  engine = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).from_topology(host, 0).build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->num_groups(), 1u);
  EXPECT_EQ((*engine)->num_domains(), 1u);
  (*engine)->stop();

  // A worker CPU this machine does not have is refused by build().
  t.groups[0].worker_cpu = 100000;
  EXPECT_EQ(TransferEngineBuilder().provider("tcp").from_topology(t, 1).build().status().code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace fabric_lib
