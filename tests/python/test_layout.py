"""Every number the Python side relies on, checked against the C compiler's view of the headers."""
import json
import os
import subprocess

import pytest

import omniconn
from omniconn import _lib

from conftest import ROOT


@pytest.fixture(scope="module")
def c_view(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("layout") / "layout")
    subprocess.run(["cc", "-std=c99", "-O0", "-I" + ROOT, "-o", exe, os.path.join(ROOT, "tests", "python", "layout.c"),
                    "-ldl", "-lpthread", "-lm"], check=True)
    return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def test_every_constant_python_uses_matches_the_headers(c_view):
    assert _lib.CONSTANTS == c_view["constants"]


def test_the_c_types_behind_the_ctypes_signatures_have_the_same_sizes(c_view):
    assert _lib.C_TYPES == c_view["types"]


def test_health_values_come_in_the_order_the_library_fills_them(c_view):
    assert list(_lib.HEALTH_FIELDS) == c_view["health"]
    from_lib = _lib.lib.omc_ffi_health_fields().decode().strip(",").split(",")
    assert from_lib == list(_lib.HEALTH_FIELDS)


def test_get_first_values_come_in_the_order_the_library_fills_them():
    from_lib = _lib.lib.omc_ffi_get_first_fields().decode().strip(",").split(",")
    assert from_lib == list(_lib.GET_FIRST_FIELDS)
    assert _lib.GET_FIRST_FIELDS.index("shape0") + _lib.CONSTANTS["OMC_MAX_DIMS"] == len(_lib.GET_FIRST_FIELDS)


def test_rdma_counters_come_in_the_order_the_library_fills_them():
    from_lib = _lib.lib.omc_ffi_rdma_counter_fields().decode().strip(",").split(",")
    assert from_lib == list(_lib.RDMA_COUNTER_FIELDS)


def test_the_library_exports_only_omc_symbols_and_has_a_versioned_soname():
    path = os.path.realpath(_lib.library_path)
    syms = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in syms.splitlines() if line.strip()]
    assert names and all(n.startswith("omc_") and not n.startswith("omc__") for n in names), \
        [n for n in names if not n.startswith("omc_")][:10]
    dyn = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    major = omniconn.version().split(".")[0]
    assert "Library soname: [libomniconn.so.%s]" % major in dyn


def test_the_library_needs_neither_libzmq_nor_libibverbs_to_load():
    path = os.path.realpath(_lib.library_path)
    needed = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    needed = [line for line in needed.splitlines() if "(NEEDED)" in line]
    assert needed and not [n for n in needed if "libzmq" in n or "libibverbs" in n], needed
    ldd = subprocess.run(["ldd", path], check=True, capture_output=True, text=True).stdout
    assert "libc.so" in ldd and "libzmq" not in ldd and "libibverbs" not in ldd, ldd


def test_the_ffi_layer_is_the_one_this_package_was_written_for():
    assert _lib.lib.omc_ffi_abi() == 1
    assert _lib.missing == []
