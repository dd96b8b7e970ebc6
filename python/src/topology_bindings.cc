// detect_topology() for Python: the machine's GPUs, RDMA NICs, NUMA nodes and their grouping into
// domain groups (fabric_lib/topology.h), to build an engine with one group per GPU.
#include <pybind11/stl.h>

#include <optional>

#include "errors.h"
#include "fabric_lib/topology.h"
#include "topology_bindings.h"

namespace fabric_lib::python {

namespace {

// One group as Python sees it: the DeviceGroup plus copies of the NICs it names.
struct PyTopologyGroup {
  DeviceGroup group;
  std::vector<NicDevice> nics;
};

PyTopologyGroup group_of(const Topology& t, size_t g) {
  PyTopologyGroup out{t.groups[g], {}};
  for (size_t i : out.group.nics) {
    if (i < t.nics.size()) out.nics.push_back(t.nics[i]);
  }
  return out;
}

}  // namespace

void bind_topology(py::module_& m) {
  py::class_<NicDevice>(m, "DomainInfo", "An RDMA NIC found on this machine (sysfs and/or a libfabric provider).")
      .def_property_readonly("name", [](const NicDevice& n) { return n.interface_name(); },
                             "The name to pass as an engine interface: the libfabric domain name when known.")
      .def_readonly("device", &NicDevice::name, "RDMA device name (e.g. 'rdmap16s27', 'mlx5_0').")
      .def_readonly("provider", &NicDevice::provider, "libfabric provider that reported it ('efa', 'verbs'), or ''.")
      .def_readonly("pci_address", &NicDevice::pci_address, "PCI address, or '' when unknown.")
      .def_readonly("numa_node", &NicDevice::numa_node, "NUMA node, -1 when unknown.")
      .def("__repr__", [](const NicDevice& n) {
        return "DomainInfo(name='" + n.interface_name() + "', provider='" + n.provider + "', pci='" + n.pci_address + "')";
      });

  py::class_<GpuDevice>(m, "GpuInfo", "An NVIDIA GPU found on the PCI bus.")
      .def_readonly("index", &GpuDevice::index, "Position in PCI address order (CUDA's PCI_BUS_ID order).")
      .def_readonly("pci_address", &GpuDevice::pci_address, "PCI address, e.g. '0000:53:00.0'.")
      .def_readonly("device_id", &GpuDevice::device_id, "PCI device id.")
      .def_readonly("numa_node", &GpuDevice::numa_node, "NUMA node, -1 when unknown.")
      .def("__repr__", [](const GpuDevice& g) { return "GpuInfo(index=" + std::to_string(g.index) + ", pci='" + g.pci_address + "')"; });

  py::class_<PyTopologyGroup>(m, "TopologyGroup", "What one domain group should use: a GPU, its NICs, NUMA-local CPUs.")
      .def_property_readonly("cuda_device", [](const PyTopologyGroup& g) { return g.group.gpu; },
                             "Index of the group's GPU (PCI order), or None for a host group.")
      .def_property_readonly("numa", [](const PyTopologyGroup& g) { return g.group.numa_node; }, "The group's NUMA node.")
      .def_property_readonly("domains", [](const PyTopologyGroup& g) { return g.nics; },
                             "The group's NICs (DomainInfo), possibly shared with another group.")
      .def_property_readonly("cpus", [](const PyTopologyGroup& g) { return g.group.cpus; },
                             "NUMA-local physical cores set aside for the group.")
      .def_property_readonly("worker_cpu", [](const PyTopologyGroup& g) { return g.group.worker_cpu; },
                             "Where the group's worker thread is pinned (-1: no CPU information).")
      .def_property_readonly("watcher_cpu", [](const PyTopologyGroup& g) { return g.group.watcher_cpu; },
                             "Where the group's UVM watcher thread goes (-1: no CPU information).")
      .def("__repr__", [](const PyTopologyGroup& g) {
        return "TopologyGroup(cuda_device=" + (g.group.gpu ? std::to_string(*g.group.gpu) : std::string("None")) +
               ", numa=" + std::to_string(g.group.numa_node) + ", domains=" + std::to_string(g.nics.size()) + ")";
      });

  py::class_<Topology>(m, "Topology",
                       "The machine as detect_topology() read it. Iterating (or indexing) it yields its\n"
                       "TopologyGroups, one per GPU, or one host group without GPUs. Pass it as\n"
                       "TransferEngine(topology=..., nets_per_gpu=N) for one engine group per GPU.")
      .def("__len__", [](const Topology& t) { return t.groups.size(); })
      .def("__getitem__", [](const Topology& t, long i) {
        const long n = static_cast<long>(t.groups.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("Topology group index out of range");
        return group_of(t, static_cast<size_t>(i));
      })
      .def_property_readonly("groups", [](const Topology& t) {
        std::vector<PyTopologyGroup> out;
        for (size_t g = 0; g < t.groups.size(); ++g) out.push_back(group_of(t, g));
        return out;
      }, "The TopologyGroups, as a list.")
      .def_readonly("gpus", &Topology::gpus, "Every GPU found (GpuInfo).")
      .def_readonly("nics", &Topology::nics, "Every RDMA NIC found (DomainInfo).")
      .def("group_interfaces", &Topology::group_interfaces, py::arg("group"),
           "Interface names of a group's NICs, in order (empty when it has none).")
      .def("describe", &Topology::describe, "A multi-line human-readable description.")
      .def("__repr__", [](const Topology& t) {
        return "Topology(gpus=" + std::to_string(t.gpus.size()) + ", nics=" + std::to_string(t.nics.size()) +
               ", groups=" + std::to_string(t.groups.size()) + ")";
      });

  m.def(
      "detect_topology",
      [](const std::string& sysfs_root, const std::vector<std::string>& providers) {
        TopologyOptions o;
        o.sysfs_root = sysfs_root;
        o.providers = providers;
        Result<Topology> t = [&] {
          py::gil_scoped_release nogil;
          return detect_topology(o);
        }();
        return take(std::move(t));
      },
      py::arg("sysfs_root") = "/sys", py::arg("providers") = std::vector<std::string>{"efa", "verbs"},
      "Reads GPUs, RDMA NICs (sysfs, and the libfabric ``providers``' domains), NUMA nodes and CPUs,\n"
      "and groups each GPU with the NICs under its PCIe switch. Missing sysfs parts are not errors\n"
      "(no GPU and no NIC: one host group); a ``sysfs_root`` that does not exist raises.");
}

}  // namespace fabric_lib::python
