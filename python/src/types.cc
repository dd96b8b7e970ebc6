// Bindings of the value types: DomainAddress, MemoryRegionDescriptor, MemoryRegionHandle,
// PageIndices, ScatterTarget, PeerGroup, and the imm_count_of_* functions.
#include "types.h"

#include <pybind11/stl.h>

#include <functional>
#include <sstream>
#include <string>

#include "errors.h"
#include "fabric_lib/domain_address.h"
#include "fabric_lib/requests.h"

namespace fabric_lib::python {

namespace {

std::span<const uint8_t> byte_span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
py::bytes to_pybytes(const std::vector<uint8_t>& v) { return py::bytes(reinterpret_cast<const char*>(v.data()), v.size()); }

// bytes, bytearray or memoryview -> std::string (TypeError otherwise).
std::string bytes_arg(const py::object& obj, const char* what) {
  if (py::isinstance<py::bytes>(obj)) return obj.cast<std::string>();
  if (PyObject_CheckBuffer(obj.ptr())) return py::bytes(py::reinterpret_steal<py::object>(PyBytes_FromObject(obj.ptr())));
  throw py::type_error(std::string(what) + ": expected bytes, bytearray or memoryview, got " +
                       std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
}

const char* device_name(MemoryKind kind) { return kind == MemoryKind::kCuda ? "cuda" : "cpu"; }

std::string desc_debug(const MrDesc& d) {
  if (d.empty()) return "MemoryRegionDescriptor(empty)";
  std::ostringstream s;
  s << "MemoryRegionDescriptor(ptr=0x" << std::hex << d.ptr() << std::dec << ", length=" << d.length()
    << ", device=" << device_name(d.memory_kind())
    << ", remote_writable=" << (has_access(d.access(), Access::kRemoteWrite) ? "True" : "False")
    << ", transport=" << (d.transport() == TransportKind::kSameHostIpc ? "ipc" : "libfabric") << ", domains=[";
  for (size_t i = 0; i < d.num_domains(); ++i) {
    s << (i ? ", " : "") << d.domain(i).address.to_hex() << "/rkey=" << d.domain(i).rkey;
  }
  s << "])";
  return s.str();
}

uint32_t page_index(const py::handle& item) {
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()));
  if (!index) {
    PyErr_Clear();
    throw py::type_error("PageIndices: page numbers must be integers, got " +
                         std::string(py::str(py::type::handle_of(item).attr("__name__"))));
  }
  const long long v = PyLong_AsLongLong(index.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error("PageIndices: page number out of range");
  }
  if (v < 0 || v > 0xFFFFFFFFll) {
    throw py::value_error("PageIndices: page number " + std::to_string(v) + " outside 0..4294967295");
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

Route route_of(std::optional<uint32_t> num_shards, std::optional<uint32_t> domain) {
  if (num_shards && domain) throw py::value_error("give num_shards or domain, not both");
  if (domain) return Pinned{*domain};
  if (num_shards) {
    if (*num_shards == 0) throw py::value_error("num_shards must be >= 1 (None: all domains)");
    return RoundRobin{*num_shards};
  }
  return RoundRobin{0};
}

void bind_types(py::module_& m) {
  py::class_<DomainAddress>(m, "DomainAddress",
                            "The network address of one domain (NIC) of an engine: opaque provider bytes.\n\n"
                            "Obtain one from ``TransferEngine.main_address``; ship it to peers as bytes\n"
                            "(``as_bytes``/``from_bytes``) or as a hex string (``str``/``from_str``).")
      .def_static(
          "from_bytes", [](const py::object& b) { return take(DomainAddress::from_bytes(byte_span(bytes_arg(b, "DomainAddress.from_bytes")))); },
          py::arg("bytes"), "Decodes an address from ``as_bytes()`` output. Raises MalformedError on bad lengths.")
      .def_static(
          "from_str", [](const std::string& s) { return take(DomainAddress::from_hex(s)); }, py::arg("s"),
          "Decodes an address from its hex string (``str(address)``). Raises MalformedError on non-hex input.")
      .def("as_bytes", [](const DomainAddress& a) { return to_pybytes(a.bytes()); }, "The address as bytes.")
      .def("__str__", &DomainAddress::to_hex, "Lower-case hex of the address bytes.")
      .def("__repr__", [](const DomainAddress& a) { return "DomainAddress('" + a.to_hex() + "')"; })
      .def(
          "__eq__", [](const DomainAddress& a, const py::object& b) {
            return py::isinstance<DomainAddress>(b) && a == b.cast<const DomainAddress&>();
          },
          py::is_operator())
      .def("__hash__", [](const DomainAddress& a) { return std::hash<DomainAddress>{}(a); })
      .def(py::pickle([](const DomainAddress& a) { return to_pybytes(a.bytes()); },
                      [](const py::bytes& b) { return take(DomainAddress::from_bytes(byte_span(std::string(b)))); }));

  py::class_<MrDesc>(m, "MemoryRegionDescriptor",
                     "What a peer needs to write into a registered region (the remote side of a\n"
                     "registration). Immutable; travels as bytes (``as_bytes``/``from_bytes``), hex, or\n"
                     "pickle. ``from_bytes`` validates every field, since the bytes come from the network.")
      .def_static(
          "from_bytes", [](const py::object& b) { return take(MrDesc::from_bytes(byte_span(bytes_arg(b, "MemoryRegionDescriptor.from_bytes")))); },
          py::arg("bytes_"), "Decodes ``as_bytes()`` output. Raises MalformedError (a ValueError) on anything malformed.")
      .def_static(
          "from_hex", [](const std::string& s) { return take(MrDesc::from_hex(s)); }, py::arg("s"),
          "Decodes ``hex()`` output. Raises MalformedError on anything malformed.")
      .def("as_bytes", [](const MrDesc& d) { return to_pybytes(d.to_bytes()); }, "The descriptor's wire bytes.")
      .def("hex", &MrDesc::to_hex, "The descriptor's wire bytes as lower-case hex.")
      .def("debug_str", &desc_debug, "A readable one-line summary.")
      .def("__repr__", &desc_debug)
      .def_property_readonly("ptr", &MrDesc::ptr, "The owner's virtual address of byte 0 (informational).")
      .def_property_readonly("length", &MrDesc::length, "Bytes in the region.")
      .def_property_readonly("num_domains", &MrDesc::num_domains, "Domains of the owning engine's group.")
      .def_property_readonly("device", [](const MrDesc& d) { return device_name(d.memory_kind()); },
                             "'cpu' or 'cuda': where the region's bytes live.")
      .def_property_readonly("remote_writable", [](const MrDesc& d) { return has_access(d.access(), Access::kRemoteWrite); },
                             "Whether peers may write into the region.")
      .def_property_readonly(
          "domain_addresses",
          [](const MrDesc& d) {
            std::vector<DomainAddress> out;
            for (size_t i = 0; i < d.num_domains(); ++i) out.push_back(d.domain(i).address);
            return out;
          },
          "The owning engine's domain addresses, one per domain of its group.")
      .def(
          "__eq__", [](const MrDesc& a, const py::object& b) { return py::isinstance<MrDesc>(b) && a == b.cast<const MrDesc&>(); },
          py::is_operator())
      .def("__hash__", [](const MrDesc& d) { return std::hash<std::string>{}(d.to_hex()); })
      .def(py::pickle([](const MrDesc& d) { return to_pybytes(d.to_bytes()); },
                      [](const py::bytes& b) { return take(MrDesc::from_bytes(byte_span(std::string(b)))); }));

  py::class_<PyMrHandle>(m, "MemoryRegionHandle",
                         "A local registration, used as the source of writes. Returned (with the\n"
                         "descriptor) by ``register_memory`` / ``register_tensor``; valid until\n"
                         "``unregister_memory`` or the engine stops.")
      .def_property_readonly("ptr", [](const PyMrHandle& h) { return h.ptr; }, "Address of byte 0.")
      .def_property_readonly("length", [](const PyMrHandle& h) { return h.length; }, "Bytes in the region.")
      .def_property_readonly("device", [](const PyMrHandle& h) { return device_name(h.kind); }, "'cpu' or 'cuda'.")
      .def_property_readonly("remote_writable", [](const PyMrHandle& h) { return has_access(h.access, Access::kRemoteWrite); },
                             "Whether peers may write into the region.")
      .def(
          "debug_str",
          [](const PyMrHandle& h) {
            std::ostringstream s;
            s << "MemoryRegionHandle(id=" << h.handle.id << ", ptr=0x" << std::hex << h.ptr << std::dec
              << ", length=" << h.length << ", device=" << device_name(h.kind) << ")";
            return s.str();
          },
          "A readable one-line summary.")
      .def("__repr__", [](const py::object& self) { return self.attr("debug_str")(); })
      .def(
          "__eq__", [](const PyMrHandle& a, const py::object& b) {
            if (!py::isinstance<PyMrHandle>(b)) return false;
            const auto& o = b.cast<const PyMrHandle&>();
            return a.handle == o.handle && a.engine_serial == o.engine_serial;
          },
          py::is_operator())
      .def("__hash__", [](const PyMrHandle& h) { return std::hash<uint64_t>{}(h.handle.id ^ (h.engine_serial << 40)); });

  py::class_<PyPageIndices>(m, "PageIndices",
                            "Page numbers for ``submit_paged_writes`` (each 0 .. 2**32-1), built from any\n"
                            "iterable of integers (a list, range, or a numpy integer array).")
      .def(py::init([](const py::iterable& indices) {
             PyPageIndices p;
             if (py::hasattr(indices, "__len__")) p.indices.reserve(py::len(indices));
             for (const py::handle& item : indices) p.indices.push_back(page_index(item));
             return p;
           }),
           py::arg("indices"))
      .def("__len__", [](const PyPageIndices& p) { return p.indices.size(); })
      .def("__getitem__", [](const PyPageIndices& p, long i) {
        const long n = static_cast<long>(p.indices.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("PageIndices index out of range");
        return p.indices[static_cast<size_t>(i)];
      })
      .def("tolist", [](const PyPageIndices& p) { return p.indices; }, "The page numbers as a list.")
      .def("__repr__", [](const PyPageIndices& p) {
        std::ostringstream s;
        s << "PageIndices([";
        for (size_t i = 0; i < p.indices.size() && i < 8; ++i) s << (i ? ", " : "") << p.indices[i];
        if (p.indices.size() > 8) s << ", ... (" << p.indices.size() << " pages)";
        s << "])";
        return s.str();
      });

  py::class_<PyScatterTarget>(m, "ScatterTarget",
                              "One destination of ``submit_scatter``: ``length`` bytes from the source at\n"
                              "``src_offset`` to ``dst_offset`` of ``dst_mr`` — or, with a PeerGroup, of the\n"
                              "group's descriptor number ``peer`` (then leave ``dst_mr`` None).")
      .def(py::init([](uint64_t length, uint64_t src_offset, uint64_t dst_offset, std::optional<MrDesc> dst_mr, uint32_t peer) {
             return PyScatterTarget{length, src_offset, dst_offset, std::move(dst_mr), peer};
           }),
           py::arg("length"), py::arg("src_offset") = 0, py::arg("dst_offset") = 0, py::arg("dst_mr") = py::none(),
           py::arg("peer") = 0)
      .def_readonly("length", &PyScatterTarget::length, "Bytes to write.")
      .def_readonly("src_offset", &PyScatterTarget::src_offset, "Offset into the source region.")
      .def_readonly("dst_offset", &PyScatterTarget::dst_offset, "Offset into the destination region.")
      .def_readonly("dst_mr", &PyScatterTarget::dst, "The destination region (None with a PeerGroup).")
      .def_readonly("peer", &PyScatterTarget::peer, "Index into the PeerGroup (used only with one).")
      .def("__repr__", [](const PyScatterTarget& t) {
        return "ScatterTarget(length=" + std::to_string(t.length) + ", src_offset=" + std::to_string(t.src_offset) +
               ", dst_offset=" + std::to_string(t.dst_offset) + (t.dst ? ", dst_mr=..." : ", peer=" + std::to_string(t.peer)) + ")";
      });

  py::class_<PyPeerGroup>(m, "PeerGroup",
                          "Destination regions resolved once by ``add_peer_group`` for repeated\n"
                          "``submit_scatter`` calls to the same peers.")
      .def("__len__", [](const PyPeerGroup& g) { return g.group.size(); })
      .def("__getitem__", [](const PyPeerGroup& g, size_t i) {
        if (i >= g.group.size()) throw py::index_error("PeerGroup index out of range");
        return g.group.desc(i);
      });

  m.def(
      "imm_count_of_write",
      [](uint64_t length, size_t num_domains, std::optional<uint32_t> num_shards, std::optional<uint32_t> domain) {
        if (num_domains == 0) throw py::value_error("num_domains must be >= 1");
        return imm_count_of_write(length, route_of(num_shards, domain), num_domains);
      },
      py::arg("length"), py::arg("num_domains"), py::arg("num_shards") = py::none(), py::arg("domain") = py::none(),
      "How many imms the target receives from one ``submit_write`` of ``length`` bytes (with an imm)\n"
      "when both engines have ``num_domains`` domains per group (``nets_per_gpu``). Pass the same\n"
      "``num_shards`` / ``domain`` as the write.");
  m.def(
      "imm_count_of_paged_writes", [](size_t num_pages) { return static_cast<uint64_t>(num_pages); }, py::arg("num_pages"),
      "How many imms the target receives from one ``submit_paged_writes`` (with an imm): one per page.");
  m.def(
      "imm_count_of_scatter_target",
      [](uint64_t length, size_t num_domains, bool by_bytes, std::optional<uint32_t> num_shards) {
        if (num_domains == 0) throw py::value_error("num_domains must be >= 1");
        ScatterRequest r;
        r.imm = 0;
        r.targets.push_back(ScatterTarget{length});
        r.sharding = by_bytes ? ScatterSharding::kByBytes : ScatterSharding::kByPeer;
        r.route = route_of(num_shards, std::nullopt);
        return imm_count_of(r, 0, num_domains);
      },
      py::arg("length"), py::arg("num_domains"), py::arg("by_bytes") = false, py::arg("num_shards") = py::none(),
      "How many imms one target of ``submit_scatter`` (with an imm) receives for its ``length`` bytes.");
  m.attr("IMM_COUNT_OF_IMM_ONLY") = kImmCountOfImmOnly;
  m.attr("IMM_COUNT_OF_BARRIER_PER_PEER") = kImmCountOfBarrierPerPeer;
}

}  // namespace fabric_lib::python
