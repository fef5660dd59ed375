"""cubin resource reader vs ptxas' own report: the ``ptxas info`` lines NVRTC logs with
``--ptxas-options=-v``, and ``nvcc -Xptxas -v`` where nvcc exists (skipped otherwise)."""

import re
import shutil
import subprocess

import pytest

from targets_testlib import ALL_ARCHS
from ninferc.errors import CompileError, TargetError
from ninferc.targets.cubin import ptx_grid_sync_entries, read_resources
from ninferc.targets.kernels import FAMILIES
from ninferc.targets.nvrtc import compile_cubin

# Kernels exercising every field: static shared, local memory (dynamically indexed array), launch
# bounds, zero / one barrier, no shared memory at all.
PROBE = r"""
extern "C" __global__ void __launch_bounds__(128) probe_smem(float* y) {
  __shared__ float s[3000];
  s[threadIdx.x] = y[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = s[(threadIdx.x * 7) % 3000];
}
extern "C" __global__ void probe_local(float* y, int i) {
  float buf[96];
  for (int k = 0; k < 96; ++k) buf[k] = y[k * blockDim.x + threadIdx.x];
  for (int k = 0; k < 96; ++k) buf[(k * i) % 96] += buf[(k + i) % 96];
  y[threadIdx.x] = buf[i % 96];
}
extern "C" __global__ void probe_plain(float* y) { y[threadIdx.x] *= 2.0f; }
"""


def ptxas_report(log: str) -> dict:
    """entry -> {registers, barriers, smem, stack} parsed from ptxas -v lines."""
    out = {}
    for chunk in re.split(r"(?=ptxas info\s*: Compiling entry function)", log):
        m = re.search(r"Compiling entry function '([^']+)'", chunk)
        if not m:
            continue
        used = re.search(r"Used (\d+) registers", chunk)
        bars = re.search(r"used (\d+) barriers", chunk)
        smem = re.search(r"(\d+) bytes smem", chunk)
        stack = re.search(r"(\d+) bytes stack frame", chunk)
        out[m.group(1)] = dict(
            registers=int(used.group(1)), barriers=int(bars.group(1)) if bars else 0,
            smem=int(smem.group(1)) if smem else 0, stack=int(stack.group(1)) if stack else 0,
        )
    return out


def assert_matches(resources, report):
    assert set(resources) == set(report)
    for name, r in resources.items():
        p = report[name]
        assert (r.registers, r.barriers, r.static_smem_bytes, r.local_bytes) == (
            p["registers"], p["barriers"], p["smem"], p["stack"]), name


def _sources():
    fam = FAMILIES["gemv"]
    specs = fam.variants(fam.sample_problems()[-1])
    return [("probe", PROBE)] + [(s.uri, s.render()) for s in specs[:2]]


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_reader_matches_nvrtc_ptxas_lines(arch):
    for name, src in _sources():
        res = compile_cubin(src, arch, name=name)
        got = read_resources(res.cubin, arch, res.ptx)
        assert_matches(got, ptxas_report(res.log))
    probe = read_resources(compile_cubin(PROBE, arch, name="probe").cubin, arch)
    assert probe["probe_smem"].static_smem_bytes == 12000 and probe["probe_smem"].max_threads == 128
    assert probe["probe_local"].local_bytes >= 96 * 4 and probe["probe_local"].max_threads is None
    assert probe["probe_plain"].static_smem_bytes == 0 and probe["probe_plain"].barriers == 0


def test_reader_rejects_wrong_arch_and_garbage():
    res = compile_cubin(PROBE, "sm_89", name="probe")
    with pytest.raises(TargetError, match="sm_89"):
        read_resources(res.cubin, "sm_90")
    with pytest.raises(CompileError):
        read_resources(b"not an elf", "sm_89")


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_reader_matches_nvcc_ptxas(arch, tmp_path):
    for i, (name, src) in enumerate(_sources()):
        cu = tmp_path / f"k{i}.cu"
        cu.write_text(src)
        out = tmp_path / f"k{i}.cubin"
        proc = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(out), str(cu)],
                              capture_output=True, text=True)
        if proc.returncode and "Unsupported gpu architecture" in proc.stderr:
            pytest.skip(f"nvcc cannot target {arch}")
        assert proc.returncode == 0, proc.stderr
        assert_matches(read_resources(out.read_bytes(), arch), ptxas_report(proc.stderr + proc.stdout))


GRID_SYNC = r"""
#include <cooperative_groups.h>
extern "C" __global__ void with_grid_sync(float* y) {
  y[threadIdx.x] += 1.f; cooperative_groups::this_grid().sync(); y[threadIdx.x] *= 2.f; }
extern "C" __global__ void shfl_only(float* y) {
  float v = y[threadIdx.x]; y[threadIdx.x] = v + __shfl_xor_sync(0xffffffffu, v, 1); }
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc (with cooperative_groups.h) not installed")
def test_grid_sync_detected_from_ptx_not_from_shuffles(tmp_path):
    cu = tmp_path / "cg.cu"
    cu.write_text(GRID_SYNC)
    subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-o", str(tmp_path / "cg.ptx"), str(cu)], check=True)
    subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "cg.cubin"), str(cu)], check=True)
    ptx = (tmp_path / "cg.ptx").read_text()
    assert ptx_grid_sync_entries(ptx) == {"with_grid_sync"}
    res = read_resources((tmp_path / "cg.cubin").read_bytes(), "sm_90", ptx)
    assert res["with_grid_sync"].uses_grid_sync and not res["shfl_only"].uses_grid_sync


def test_the_reader_does_not_import_the_plan():
    """The resource record lives beside its reader: ``targets/cubin.py`` loads without ``targets/plan.py`` (which
    imports the reader), so the two modules form no import circle."""
    import subprocess
    import sys

    code = "import sys, ninferc.targets.cubin; print('ninferc.targets.plan' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
