#!/usr/bin/env python3
"""Proves that includes can only run downward (cmake/Layers.cmake, docs/architecture.md).

For one source file of each layer it takes that file's real compile command from the build's
compile_commands.json (in a unity build, the command of the batch file that includes it) and
compiles a one-line file including a header: every header of a layer below must be found, every
header of a layer above or beside must not ("No such file"). A wrong-way include in the code would
fail the build the same way. The checks run in parallel, one per core.

Usage: check_layers.py BUILD_DIR SOURCE_DIR
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import tempfile

# layer (a source file of it) -> (headers it must see, headers it must not see)
RULES = {
    "src/base/status.cc": (
        ["base/log.h", "base/slab_pool.h", "fabric_lib/status.h", "fabric_lib/memory.h"],
        ["gpu/copy_engine.h", "transport/domain.h", "core/request.h", "engine/backend_factory.h",
         "fabric_lib/requests.h", "fabric_lib/transfer_engine.h"],
    ),
    "src/gpu/copy_mode.cc": (
        ["base/clock.h", "gpu/copy_engine.h", "fabric_lib/mapped_word.h"],
        ["transport/domain.h", "core/request.h", "fabric_lib/completion.h"],
    ),
    "src/transport/reorder/reordering_domain.cc": (
        ["transport/domain.h", "base/log.h"],
        ["transport/libfabric/libfabric_domain.h", "transport/ipc/ipc_domain.h",
         "transport/staging/staging_domain.h", "core/request.h", "engine/backend_factory.h"],
    ),
    "src/transport/ipc/ipc_domain.cc": (
        ["transport/domain.h", "gpu/copy_engine.h", "transport/ipc/ring_layout.h"],
        ["transport/libfabric/fabric_info.h", "transport/staging/staging_domain.h",
         "transport/reorder/reordering_domain.h", "core/request.h"],
    ),
    "src/transport/libfabric/libfabric_domain.cc": (
        ["transport/domain.h", "gpu/memory_kind.h"],
        ["transport/ipc/ipc_domain.h", "transport/staging/staging_domain.h", "core/request.h"],
    ),
    "src/transport/staging/staging_domain.cc": (
        ["transport/domain.h", "gpu/copy_engine.h"],
        ["transport/libfabric/libfabric_domain.h", "transport/ipc/ipc_domain.h", "core/request.h"],
    ),
    "src/core/request.cc": (
        ["transport/domain.h", "transport/guard/guarded_domain.h", "gpu/memory_kind.h", "fabric_lib/requests.h"],
        ["transport/libfabric/libfabric_domain.h", "transport/ipc/ipc_domain.h",
         "transport/staging/staging_domain.h", "transport/reorder/reordering_domain.h",
         "engine/backend_factory.h", "topology/sysfs.h", "fabric_lib/transfer_engine.h",
         "fabric_lib/engine_builder.h"],
    ),
    "src/topology/topology.cc": (
        ["topology/sysfs.h", "base/log.h", "fabric_lib/topology.h"],
        ["transport/domain.h", "core/request.h", "engine/backend_factory.h"],
    ),
    "src/engine/backend_factory.cc": (
        ["core/engine_core.h", "transport/ipc/ipc_factory.h", "transport/libfabric/libfabric_domain.h",
         "fabric_lib/engine_builder.h"],
        [],
    ),
}


def unity_batch_includes(entry, path):
    """True when `entry` compiles a unity batch file (CMAKE_UNITY_BUILD) that includes `path`."""
    if "/Unity/" not in entry["file"]:
        return False
    try:
        with open(entry["file"]) as f:
            return any(line.startswith("#include") and os.path.realpath(line.split('"')[1]) == path
                       for line in f if '"' in line)
    except OSError:
        return False


def compile_command(db, source_dir, rel):
    path = os.path.realpath(os.path.join(source_dir, rel))
    for match in (lambda e: os.path.realpath(e["file"]) == path, lambda e: unity_batch_includes(e, path)):
        for entry in db:
            if match(entry):
                args = entry.get("arguments") or shlex.split(entry["command"])
                return args, entry["directory"]
    return None, None


def compiles(args, directory, header):
    # The real command, with the source replaced by a file holding one include.
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a.endswith((".cc", ".cpp", ".cu", ".cxx")) or a in ("-MD", "-MMD"):
            continue
        out.append(a)
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as f:
        f.write('#include "%s"\n' % header)
        probe = f.name
    try:
        r = subprocess.run(out + ["-fsyntax-only", probe], cwd=directory, capture_output=True, text=True)
        return r.returncode == 0, r.stderr
    finally:
        os.unlink(probe)


def main():
    build_dir, source_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        db = json.load(f)
    failures = 0
    probes = []  # (layer's source, header, must it compile, its compile command, directory)
    for rel, (allowed, forbidden) in RULES.items():
        args, directory = compile_command(db, source_dir, rel)
        if args is None:
            print("layers: no compile command for %s" % rel)
            failures += 1
            continue
        probes += [(rel, h, True, args, directory) for h in allowed]
        probes += [(rel, h, False, args, directory) for h in forbidden]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda p: compiles(p[3], p[4], p[1]), probes))
    for (rel, h, allowed, _, _), (ok, err) in zip(probes, results):
        if allowed and not ok:
            failures += 1
            print("layers: %s cannot include %s, a layer below it:\n%s" % (rel, h, err[-800:]))
        elif not allowed and (ok or "No such file" not in err):
            failures += 1
            print("layers: %s can include %s, which is not below it" % (rel, h))
    print("layers: %d checks, %d failed" % (len(probes), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
