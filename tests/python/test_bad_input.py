"""Bad input raises a clear Python exception at once and starts nothing: non-contiguous or
empty arrays, wrong dtypes and sizes, unknown handles, garbage descriptor bytes, bad values."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import arrays
import fabric_lib as fl
from waiters import QUIET_S, Completion


def test_non_contiguous_array_is_refused(fresh_engine):
    with pytest.raises(ValueError, match="not C-contiguous"):
        fresh_engine.register_tensor(arrays.non_contiguous(4096))
    if arrays.BACKEND == "numpy":  # negative strides (numpy refuses them through DLPack itself)
        with pytest.raises(ValueError, match="not C-contiguous"):
            fresh_engine.register_tensor(np.zeros(64, dtype=np.uint8)[::-1])
        with pytest.raises(ValueError, match="not C-contiguous"):  # Fortran order, 2-D
            fresh_engine.register_tensor(np.zeros((8, 8), dtype=np.float32, order="F"))


def test_empty_array_is_refused(fresh_engine):
    with pytest.raises(ValueError, match="empty"):
        fresh_engine.register_tensor(arrays.zeros(0))


def test_wrong_dtypes_are_refused(fresh_engine):
    with pytest.raises(TypeError, match="Python objects"):
        fresh_engine.register_tensor(np.array([object(), object()], dtype=object))
    with pytest.raises(TypeError, match="neither __dlpack__ nor the buffer protocol"):
        fresh_engine.register_tensor([1, 2, 3])
    if arrays.BACKEND == "torch":
        import torch

        with pytest.raises(TypeError, match="__dlpack__"):  # torch refuses to export these
            fresh_engine.register_tensor(torch.zeros(4, requires_grad=True))
    with pytest.raises(TypeError, match="integers"):
        fl.PageIndices([0.5, 1.0])
    with pytest.raises(TypeError, match="integers"):
        fl.PageIndices(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="outside 0..4294967295"):
        fl.PageIndices([-1])


def test_typed_arrays_register_their_byte_size(fresh_engine):
    for dtype, size in (("float32", 4), ("int64", 8), ("float16", 2)):
        handle, desc = fresh_engine.register_tensor(arrays.typed(10, dtype))
        assert handle.length == desc.length == 10 * size
        fresh_engine.unregister_memory(handle)


def test_read_only_buffers_register_local_only(fresh_engine):
    data = b"immutable bytes"
    handle, desc = fresh_engine.register_tensor(data)
    assert handle.length == len(data) and not desc.remote_writable and not handle.remote_writable
    with pytest.raises(ValueError, match="read-only"):
        fresh_engine.register_tensor(b"xyz", remote_write=True)
    # A peer cannot target a region that is not remotely writable.
    src_h, _ = fresh_engine.register_tensor(bytearray(16))
    with pytest.raises(fl.FabricError) as info:
        fresh_engine.submit_write(src_h, 0, 4, None, desc, 0)
    assert info.value.code == "invalid_argument"


def test_sizes_outside_regions(fresh_engine):
    src = arrays.zeros(4096)
    handle, desc = fresh_engine.register_tensor(src)
    done = Completion()
    with pytest.raises(fl.OutOfRangeError) as info:
        fresh_engine.submit_write(handle, 0, 4097, None, desc, 0, done.on_done, done.on_error)
    assert info.value.code == "out_of_range" and isinstance(info.value, ValueError)
    with pytest.raises(fl.OutOfRangeError):
        fresh_engine.submit_write(handle, 4000, 200, 1, desc, 0)
    with pytest.raises(fl.OutOfRangeError):
        fresh_engine.submit_write(handle, 0, 200, 1, desc, 4000)
    with pytest.raises(fl.OutOfRangeError):
        fresh_engine.submit_paged_writes(1024, handle, [0, 4], 1024, 0, desc, [0, 1], 1024, 0, 1)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        fresh_engine.submit_write(handle, -1, 10, None, desc, 0)
    with pytest.raises(ValueError, match="len must be > 0"):
        fresh_engine.register_memory(handle.ptr, 0, "cpu")
    with pytest.raises(ValueError, match="null"):
        fresh_engine.register_memory(0, 10, "cpu")
    with pytest.raises(fl.InvalidArgumentError):  # page lists of different lengths
        fresh_engine.submit_paged_writes(16, handle, [0, 1], 16, 0, desc, [0], 16, 0, 1)
    with pytest.raises(ValueError, match="num_shards"):
        fresh_engine.submit_write(handle, 0, 10, 1, desc, 0, num_shards=0)
    with pytest.raises(ValueError, match="not both"):
        fresh_engine.submit_write(handle, 0, 10, 1, desc, 0, num_shards=1, domain=0)
    with pytest.raises(ValueError, match="no dst_mr"):
        fresh_engine.submit_scatter(handle, [fl.ScatterTarget(10)], 1)
    # Nothing was started: after the quiet interval, still no completion.
    assert not done.wait(QUIET_S) and done.finished == 0


def test_unknown_handles(fresh_engine):
    arr = arrays.zeros(64)
    handle, desc = fresh_engine.register_tensor(arr)
    fresh_engine.unregister_memory(handle)
    with pytest.raises(fl.NotFoundError, match="unknown or unregistered"):
        fresh_engine.submit_write(handle, 0, 8, None, desc, 0)
    with pytest.raises(fl.NotFoundError) as info:
        fresh_engine.unregister_memory(handle)
    assert info.value.code == "not_found" and isinstance(info.value, LookupError)
    with pytest.raises(fl.NotFoundError, match="no registration starts at ptr"):
        fresh_engine.unregister_memory(12345)
    with pytest.raises(TypeError):
        fresh_engine.unregister_memory("handle")
    with fl.TransferEngine(provider="tcp", interfaces=["lo"]) as other:
        other_handle, _ = other.register_tensor(arrays.zeros(64))
        with pytest.raises(fl.NotFoundError, match="another engine"):
            fresh_engine.unregister_memory(other_handle)
        with pytest.raises(fl.NotFoundError, match="another engine"):
            fresh_engine.submit_write(other_handle, 0, 8, None, desc, 0)


def test_registration_by_pointer(fresh_engine):
    arr = np.arange(256, dtype=np.uint8)
    ptr = arr.__array_interface__["data"][0]
    handle, desc = fresh_engine.register_memory(ptr, arr.nbytes, "cpu")
    assert (handle.ptr, handle.length, handle.device, desc.device) == (ptr, 256, "cpu", "cpu")
    fresh_engine.unregister_memory(ptr)
    with pytest.raises(fl.NotFoundError):
        fresh_engine.unregister_memory(handle)
    with pytest.raises(ValueError, match="device"):
        fresh_engine.register_memory(ptr, 256, "tpu")
    with pytest.raises(fl.FabricError):  # no CUDA in this build / not CUDA memory
        fresh_engine.register_memory(ptr, 256, "cuda:0")


def test_garbage_descriptor_bytes():
    for garbage in (b"", b"garbage", b"FLMD" + bytes(40), bytes(range(256))):
        with pytest.raises(fl.MalformedError) as info:
            fl.MemoryRegionDescriptor.from_bytes(garbage)
        assert info.value.code == "malformed" and isinstance(info.value, ValueError)
        assert str(info.value).startswith("malformed: ")
    with pytest.raises(fl.MalformedError):
        fl.MemoryRegionDescriptor.from_hex("xyz")
    with pytest.raises(fl.MalformedError):
        fl.DomainAddress.from_str("0g")
    with pytest.raises(TypeError):
        fl.MemoryRegionDescriptor.from_bytes(12)


def test_truncated_and_mutated_descriptors_are_refused(fresh_engine):
    _, desc = fresh_engine.register_tensor(arrays.zeros(64))
    raw = desc.as_bytes()
    assert fl.MemoryRegionDescriptor.from_bytes(raw) == desc
    for cut in range(len(raw)):
        with pytest.raises(fl.MalformedError):
            fl.MemoryRegionDescriptor.from_bytes(raw[:cut])
    bad_version = bytearray(raw)
    bad_version[4] ^= 0xFF
    with pytest.raises(fl.MalformedError):
        fl.MemoryRegionDescriptor.from_bytes(bytes(bad_version))
    assert pickle.loads(pickle.dumps(desc)) == desc
    blank = fl.MemoryRegionDescriptor.__new__(fl.MemoryRegionDescriptor)
    with pytest.raises(fl.MalformedError):  # what unpickling mutated bytes runs
        blank.__setstate__(raw[:-1] + b"\x00\x00")


def test_bad_imm_and_callback_values(fresh_engine):
    handle, desc = fresh_engine.register_tensor(arrays.zeros(64))
    with pytest.raises(ValueError, match=r"0 \.\. 2\*\*32-1"):
        fresh_engine.submit_write(handle, 0, 8, 2**32, desc, 0)
    with pytest.raises(ValueError, match=r"0 \.\. 2\*\*32-1"):
        fresh_engine.submit_imm(-1, desc)
    with pytest.raises(TypeError, match="must be an int"):
        fresh_engine.submit_imm("7", desc)
    with pytest.raises(TypeError, match="on_done must be callable"):
        fresh_engine.submit_imm(7, desc, on_done=42)
    with pytest.raises(TypeError, match="on_recv must be callable"):
        fresh_engine.submit_bouncing_recvs(1, 16, None)
    with pytest.raises(fl.InvalidArgumentError):
        fresh_engine.submit_bouncing_recvs(0, 16, print)
    with pytest.raises(ValueError, match="expected_count"):
        fresh_engine.set_imm_count_expected(7, 0, print)
    fresh_engine.set_imm_count_expected(7, 1, print)
    with pytest.raises(fl.AlreadyExistsError):
        fresh_engine.set_imm_count_expected(7, 2, print)
    assert fresh_engine.remove_imm_count(7) == (0, 1)
    with pytest.raises(fl.InvalidArgumentError):
        fl.TransferEngine(provider="tcp", domains_per_group=0)
    with pytest.raises(ValueError, match="idle_policy"):
        fl.TransferEngine(provider="tcp", idle_policy="sometimes")
    with pytest.raises(ValueError, match="same setting"):
        fl.TransferEngine(provider="tcp", domains_per_group=1, nets_per_gpu=2)
