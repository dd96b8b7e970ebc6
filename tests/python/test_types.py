"""Value types without a peer: addresses, descriptors, page lists, the imm_count_of_* rules, the
error classes and the package surface."""

from __future__ import annotations

import os
import pickle
import re

import numpy as np
import pytest

import arrays
import fabric_lib as fl


def test_domain_address_round_trips(fresh_engine):
    a = fresh_engine.main_address
    assert fl.DomainAddress.from_bytes(a.as_bytes()) == a
    assert fl.DomainAddress.from_str(str(a)) == a
    assert pickle.loads(pickle.dumps(a)) == a
    assert re.fullmatch("[0-9a-f]+", str(a)) and len(str(a)) == 2 * len(a.as_bytes())
    assert repr(a) == f"DomainAddress('{a}')"
    b = fresh_engine.domain_addresses()[1]
    assert a != b and hash(a) != hash(b) and a != str(a)
    assert {a: 1, fl.DomainAddress.from_str(str(a)): 2} == {a: 2}
    assert fresh_engine.domain_addresses()[0] == a


def test_descriptor_round_trips(fresh_engine):
    arr = arrays.zeros(1000)
    handle, desc = fresh_engine.register_tensor(arr)
    assert desc.length == handle.length == 1000 and desc.ptr == handle.ptr
    assert desc.num_domains == fresh_engine.nets_per_gpu == 2
    assert desc.domain_addresses == fresh_engine.domain_addresses()
    assert desc.remote_writable and desc.device == "cpu"
    for copy in (fl.MemoryRegionDescriptor.from_bytes(desc.as_bytes()),
                 fl.MemoryRegionDescriptor.from_bytes(bytearray(desc.as_bytes())),
                 fl.MemoryRegionDescriptor.from_hex(desc.hex()),
                 pickle.loads(pickle.dumps(desc))):
        assert copy == desc and hash(copy) == hash(desc)
        assert copy.as_bytes() == desc.as_bytes()
    assert "length=1000" in desc.debug_str() and "length=1000" in handle.debug_str()
    assert handle == handle and handle != desc


def test_page_indices():
    assert fl.PageIndices([3, 1, 2]).tolist() == [3, 1, 2]
    assert fl.PageIndices(range(5)).tolist() == [0, 1, 2, 3, 4]
    p = fl.PageIndices(np.array([7, 2**32 - 1], dtype=np.int64))
    assert len(p) == 2 and p[-1] == 2**32 - 1 and p[0] == 7
    with pytest.raises(IndexError):
        p[2]
    with pytest.raises(ValueError):
        fl.PageIndices([2**32])
    assert "PageIndices([0, 1" in repr(fl.PageIndices(range(100)))


def test_imm_count_rules():
    assert fl.imm_count_of_write(1, 2) == 1
    assert fl.imm_count_of_write(128 << 10, 2) == 2
    assert fl.imm_count_of_write((128 << 10) - 1, 2) == 1          # < 2 x 64 KiB stays on one domain
    assert fl.imm_count_of_write(1 << 30, 4) == 4
    assert fl.imm_count_of_write(1 << 30, 4, num_shards=3) == 3
    assert fl.imm_count_of_write(1 << 30, 4, domain=2) == 1
    assert fl.imm_count_of_write(3 << 30, 1) == 3                  # WRs of at most 1 GiB, each with the imm
    assert fl.imm_count_of_paged_writes(17) == 17
    assert fl.imm_count_of_scatter_target(1 << 20, 4) == 1
    assert fl.imm_count_of_scatter_target(1 << 20, 4, by_bytes=True) == 4
    assert fl.IMM_COUNT_OF_IMM_ONLY == 1 and fl.IMM_COUNT_OF_BARRIER_PER_PEER == 1
    with pytest.raises(ValueError):
        fl.imm_count_of_write(10, 0)


def test_error_classes():
    classes = fl.error_classes()
    assert {"invalid_argument", "not_found", "out_of_range", "malformed", "cancelled", "stopped"} <= set(classes)
    for code, cls in classes.items():
        assert issubclass(cls, fl.FabricError) and cls.code == code
        assert getattr(fl, cls.__name__) is cls
    assert issubclass(fl.InvalidArgumentError, ValueError)
    assert issubclass(fl.MalformedError, ValueError)
    assert issubclass(fl.NotFoundError, LookupError)
    assert issubclass(fl.DeadlineExceededError, TimeoutError)
    assert not issubclass(fl.CancelledError, ValueError)


def test_builder_and_properties():
    b = fl.TransferEngine.builder().provider("tcp").nets_per_gpu(2).interfaces(["lo"]).idle_policy("adaptive")
    assert b.settings() == {"provider": "tcp", "domains_per_group": 2, "interfaces": ["lo"], "idle_policy": "adaptive"}
    with b.build() as e:
        assert isinstance(e, fl.TransferEngine)
        assert e.nets_per_gpu == 2 and e.num_domains == 2 and e.num_groups == 1
        assert e.provider.startswith("tcp")
        assert "running" in repr(e)
        assert set(e.stats()) >= {"requests_submitted", "imms_received"}
    with fl.TransferEngine(provider="tcp", nets_per_gpu=1, groups=2, interfaces=["lo"]) as e:
        assert e.num_domains == 2 and e.nets_per_gpu == 1 and len(e.domain_addresses(1)) == 1
        with pytest.raises(ValueError, match="group 2 out of range"):
            e.domain_addresses(2)


def test_version_matches_cmake_project():
    top = os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")
    with open(top) as f:
        version = re.search(r"project\(fabric_lib VERSION ([0-9.]+)", f.read()).group(1)
    assert fl.__version__ == version


def test_every_public_name_has_a_docstring():
    missing = []
    for name in fl.__all__:
        obj = getattr(fl, name)
        if isinstance(obj, (int, str)):
            continue
        if not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
        if isinstance(obj, type):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                if not (getattr(member, "__doc__", None) or "").strip():
                    missing.append(f"{name}.{attr}")
    assert not missing, f"no docstring: {missing}"


def test_type_stubs_match_the_extension():
    import ast

    from fabric_lib import _fabric_lib

    stub = os.path.join(os.path.dirname(fl.__file__), "_fabric_lib.pyi")
    with open(stub) as f:
        tree = ast.parse(f.read())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "TypedDict" for b in node.bases):
            continue  # the shape of a returned dict (e.g. metrics()), not a class of the extension
        if isinstance(node, ast.ClassDef):
            stubbed.add(node.name)
            cls = getattr(_fabric_lib, node.name, None)
            assert cls is not None, f"stub class {node.name} missing from the extension"
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and member.name not in ("__iter__",):
                    assert hasattr(cls, member.name), f"{node.name}.{member.name} in the stub only"
        elif isinstance(node, ast.FunctionDef):
            stubbed.add(node.name)
            assert hasattr(_fabric_lib, node.name), f"stub function {node.name} missing"
    public = {n for n in dir(_fabric_lib) if not n.startswith("__") and not n.isupper()}
    assert public - stubbed == set(), f"not in the stub: {sorted(public - stubbed)}"
