"""Builds the `fabric_lib` wheel: configures the CMake project with only the libraries and the
Python extensions, installs their components (python: the extension + libfabric_lib.so.0, RPATH
$ORIGIN; python_kv, python_weights, python_moe: the apps' modules in fabric_lib.kv / .weights /
.moe and their libraries beside libfabric_lib.so.0) into the package, and lets setuptools add the
pure-Python files.

    python3 -m pip install --no-build-isolation .     # Debian: inside a venv (PEP 668)

Environment: FABRIC_LIB_CMAKE_ARGS adds CMake arguments (e.g. "-DCMAKE_PREFIX_PATH=/opt/deps");
FABRIC_LIB_BUILD_JOBS caps the parallel compile jobs (default: all cores).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD_BASE = "build-pip"  # not "build/": that is the CMake build tree of scripts/build.sh
# The extension modules the wheel carries, their install components, and the app subpackages.
MODULES = ["_fabric_lib", "_kv", "_fabric_lib_weights", "_moe"]
COMPONENTS = ["python", "python_kv", "python_weights", "python_moe"]
APP_PACKAGES = ["kv", "weights", "moe"]


def project_version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(fabric_lib VERSION ([0-9.]+)", text).group(1)


class CMakeExtension(Extension):
    """An extension CMake builds (no sources for setuptools to compile)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Runs CMake configure / build / install(component python) for each CMakeExtension."""

    def build_extension(self, ext: Extension) -> None:
        package_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        temp = Path(self.build_temp).resolve()
        build_dir, stage = temp / "cmake", temp / "stage"
        configure = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DFABRIC_LIB_PYTHON=ON",
            "-DFABRIC_LIB_BUILD_TESTS=OFF",
            "-DFABRIC_LIB_BUILD_TOOLS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DFABRIC_LIB_PYTHON_INSTALL_DIR=.",
            "-DFABRIC_LIB_PYTHON_BUNDLE_LIB=ON",
        ]
        try:  # a pip-installed pybind11 (Debian's pybind11-dev is found by CMake directly)
            import pybind11

            configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        configure += shlex.split(os.environ.get("FABRIC_LIB_CMAKE_ARGS", ""))
        jobs = os.environ.get("FABRIC_LIB_BUILD_JOBS", str(os.cpu_count() or 1))
        run = lambda *args: subprocess.run([str(a) for a in args], check=True)  # noqa: E731
        run("cmake", "-S", ROOT, "-B", build_dir, *configure)
        run("cmake", "--build", build_dir, "--target", *MODULES, "-j", jobs)
        shutil.rmtree(stage, ignore_errors=True)
        for component in COMPONENTS:
            run("cmake", "--install", build_dir, "--component", component, "--prefix", stage)
        package_dir.mkdir(parents=True, exist_ok=True)
        staged = stage / "fabric_lib"
        for f in staged.glob("_fabric_lib*.so"):
            shutil.copy2(f, package_dir / f.name)
        for sub in APP_PACKAGES:
            (package_dir / sub).mkdir(exist_ok=True)
            modules = list((staged / sub).glob("_*.so"))
            if len(modules) != 1:
                raise RuntimeError(f"expected one extension module in {staged / sub}, found {modules}")
            shutil.copy2(modules[0], package_dir / sub / modules[0].name)
        # Only the SONAME files (lib*.so.<major>) the extensions need: a wheel cannot hold
        # symlinks, and copying follows them.
        sonames = [f for f in staged.glob("libfabric_lib*.so.*") if re.fullmatch(r"libfabric_lib(_\w+)?\.so\.\d+", f.name)]
        want = 1 + len(APP_PACKAGES)
        if len(sonames) != want:
            raise RuntimeError(f"expected {want} libfabric_lib*.so.<major> in {staged}, found {sonames}")
        for f in sonames:
            shutil.copy(f, package_dir / f.name)


(ROOT / BUILD_BASE).mkdir(exist_ok=True)
setup(
    version=project_version(),
    ext_modules=[CMakeExtension("fabric_lib._fabric_lib")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
)
