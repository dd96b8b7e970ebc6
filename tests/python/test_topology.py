"""detect_topology() from Python, on this machine and on a fake sysfs tree, and an engine built
from it (one group per topology group)."""

from __future__ import annotations

import pytest

import fabric_lib as fl


def fake_sysfs(root, gpus):
    for bdf in gpus:
        d = root / "bus" / "pci" / "devices" / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x10de\n")
        (d / "class").write_text("0x030200\n")
        (d / "device").write_text("0x2335\n")
        (d / "numa_node").write_text("0\n")
    return str(root)


def test_this_machine():
    topo = fl.detect_topology()
    assert isinstance(topo, fl.Topology) and len(topo) >= 1
    assert len(topo.groups) == len(topo)
    assert topo.describe()
    group = topo[0]
    assert isinstance(group, fl.TopologyGroup)
    assert group.cuda_device is None or group.cuda_device >= 0
    assert all(isinstance(d, fl.DomainInfo) for d in group.domains)
    assert fl.TransferEngine.detect_topology().describe() == topo.describe()


def test_fake_two_gpu_machine_builds_two_groups(tmp_path):
    topo = fl.detect_topology(fake_sysfs(tmp_path, ["0000:53:00.0", "0000:64:00.0"]), providers=[])
    assert [g.cuda_device for g in topo] == [0, 1]
    assert [g.pci_address for g in topo.gpus] == ["0000:53:00.0", "0000:64:00.0"]
    assert topo.gpus[1].device_id == 0x2335 and topo.nics == []
    with fl.TransferEngine(provider="tcp", interfaces=["lo"], topology=topo) as e:
        assert e.num_groups == 2 and e.nets_per_gpu == 1  # no NICs: at least one domain, on `interfaces`
    with fl.TransferEngine.builder().provider("tcp").interfaces(["lo"]).from_topology(topo, 2).build() as e:
        assert e.num_groups == 2 and e.nets_per_gpu == 2 and e.num_domains == 4


def test_missing_sysfs_root_raises(tmp_path):
    with pytest.raises(fl.NotFoundError, match="does not exist"):
        fl.detect_topology(str(tmp_path / "nowhere"))
