"""Read a kernel's real resource usage from a cubin (ELF) with pyelftools.

Format facts follow ../shared/notes/cubin-resources.md (measured with NVRTC 12.9 / 13.5 and nvcc 13.0):

* ``.nv.info`` (module-wide) and ``.nv.info.<kernel>`` hold records ``u8 format, u8 attribute`` then,
  for format 0x04 (EIFMT_SVAL), ``u16 size`` + payload; every other format carries a u16 inline value.
* Module-wide payloads are ``(u32 symbol index, u32 value)``: EIATTR_REGCOUNT 0x2f (registers; the old
  ``sh_info >> 24`` trick reads 0 on sm_90+), EIATTR_FRAME_SIZE 0x11 (per-thread stack frame = local
  memory incl. spills), EIATTR_MIN_STACK_SIZE 0x12, EIATTR_MAX_STACK_SIZE 0x23.
* Per-kernel: EIATTR_MAX_THREADS 0x05 (3 x u32, from ``__launch_bounds__``), EIATTR_REQNTID 0x10
  (3 x u32), EIATTR_NUM_BARRIERS 0x4c (ABI v8; ABI v7 keeps the count in bits 20-26 of
  ``.text.<kernel>``'s sh_flags).
* Grid-wide sync: EIATTR_COOP_GROUP_INSTR_OFFSETS 0x28 is NOT a reliable marker -- measured with
  NVRTC 13.5 and nvcc 13.0, it also lists plain ``__shfl_xor_sync`` instructions. What
  ``cooperative_groups::this_grid().sync()`` really needs is the driver's grid workspace, read from
  ``%envreg1``/``%envreg2`` (it traps when they are null, i.e. without a cooperative launch); that is
  visible in the PTX only, so :func:`read_resources` decides ``uses_grid_sync`` from the PTX when given
  (False otherwise). ninferc's own templates use ``ninfer::grid_barrier`` and declare cooperation in
  their :class:`KernelSpec` instead.
* Static shared memory = size of ``.nv.shared.<kernel>``, minus 1024 when ``.nv.shared.reserved.0``
  exists (sm_90 / sm_120a fold the driver-reserved 1 KiB into the section).
* The SM version is in ``e_flags`` bits 8-15 (ABI v8) or bits 0-7 (ABI v7); the 'a' suffix is not
  recorded reliably, so the caller states the target.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ninferc.errors import CompileError, TargetError
from ninferc.targets.arch import Arch, get_arch

EIFMT_SVAL = 0x04
EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_COOP_GROUP_INSTR_OFFSETS = 0x28
EIATTR_REGCOUNT = 0x2F
EIATTR_NUM_BARRIERS = 0x4C

_RESERVED_SHARED = ".nv.shared.reserved.0"
_PTX_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)")
_RESERVED_BYTES = 1024


@dataclass(frozen=True)
class KernelResources:
    """Resources one compiled kernel uses (from the cubin via :func:`ninferc.targets.cubin.read_resources`,
    or from the driver's function attributes at run time).

    Attributes:
        registers: 32-bit registers per thread.
        static_smem_bytes: static shared memory per CTA, bytes (excluding the driver's reserved 1 KiB).
        local_bytes: local memory (stack frame incl. spills) per thread, bytes.
        max_threads: max threads per CTA from ``__launch_bounds__``/reqntid, or None if unbounded.
        uses_grid_sync: the kernel calls cooperative_groups ``grid.sync()`` (cubin says so).
        barriers: named CTA barriers used (0 if the kernel never calls ``__syncthreads``).
    """

    registers: int
    static_smem_bytes: int
    local_bytes: int
    max_threads: int | None
    uses_grid_sync: bool
    barriers: int

    def to_json(self) -> dict:
        """Plain-dict form (for artifacts and goldens)."""
        return {
            "registers": self.registers,
            "static_smem_bytes": self.static_smem_bytes,
            "local_bytes": self.local_bytes,
            "max_threads": self.max_threads,
            "uses_grid_sync": self.uses_grid_sync,
            "barriers": self.barriers,
        }



def parse_nv_info(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """Decode an ``.nv.info*`` section into ``(format, attribute, payload-bytes-or-u16)`` records.

    Raises:
        CompileError: a record runs past the end of the section (corrupt or unknown layout).
    """
    out: list[tuple[int, int, bytes | int]] = []
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr = data[pos], data[pos + 1]
        (val,) = struct.unpack_from("<H", data, pos + 2)
        pos += 4
        if fmt == EIFMT_SVAL:
            if pos + val > len(data):
                raise CompileError(f"corrupt .nv.info record (attribute 0x{attr:02x} overruns the section)")
            out.append((fmt, attr, data[pos:pos + val]))
            pos += val
        else:
            out.append((fmt, attr, val))
    if pos != len(data):
        raise CompileError(f"corrupt .nv.info section ({len(data) - pos} trailing bytes)")
    return out


def cubin_sm_number(elf: ELFFile) -> int:
    """The SM version number (86, 89, 90, 120...) recorded in the cubin's ``e_flags``."""
    flags = elf.header["e_flags"]
    abi = elf.header["e_ident"]["EI_ABIVERSION"]
    return (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF


def ptx_grid_sync_entries(ptx: str) -> set[str]:
    """Entry points whose PTX reads the driver's grid-sync workspace (``%envreg1``/``%envreg2``),
    i.e. that call ``cooperative_groups::grid_group::sync()``."""
    out = set()
    parts = _PTX_ENTRY_RE.split(ptx)
    for name, body in zip(parts[1::2], parts[2::2]):
        if "%envreg1" in body or "%envreg2" in body:
            out.add(name)
    return out


def read_resources(cubin: bytes, arch: str | Arch, ptx: str | None = None):
    """Resource usage of every kernel entry point in ``cubin``.

    Args:
        cubin: ELF bytes from NVRTC/nvcc/ptxas.
        arch: the target it was compiled for (an :class:`~ninferc.targets.arch.Arch`, or its name ``"sm_90"``);
            checked against the ELF header.
        ptx: the PTX of the same compilation, if available; only used to detect ``grid.sync()``.

    Returns:
        dict entry name -> :class:`KernelResources` with registers per thread,
        static shared bytes per CTA (reserved 1 KiB removed), local (stack frame) bytes per thread,
        max threads from launch bounds (None without), grid-sync use (from ``ptx``; False without it),
        and named-barrier count.

    Raises:
        CompileError: not an ELF cubin, or a malformed ``.nv.info`` section.
        TargetError: the cubin was built for another SM version than ``arch``.
    """
    target = get_arch(arch)
    try:
        elf = ELFFile(io.BytesIO(cubin))
    except ELFError as exc:
        raise CompileError(f"not a cubin (ELF parse failed: {exc})") from None
    sm = cubin_sm_number(elf)
    if sm != target.sm_number:
        raise TargetError(f"cubin is for sm_{sm}, not {target.name} (sm {target.sm_number})")

    symtab = elf.get_section_by_name(".symtab")
    names = {i: s.name for i, s in enumerate(symtab.iter_symbols())} if symtab else {}
    sections = {s.name: s for s in elf.iter_sections()}

    module: dict[int, dict[int, int]] = {}
    if ".nv.info" in sections:
        for fmt, attr, payload in parse_nv_info(sections[".nv.info"].data()):
            if fmt == EIFMT_SVAL and isinstance(payload, bytes) and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                module.setdefault(attr, {})[sym] = value
    by_name = {attr: {names.get(sym, ""): v for sym, v in vals.items()} for attr, vals in module.items()}

    reserved = _RESERVED_SHARED in sections
    grid_sync_entries = ptx_grid_sync_entries(ptx) if ptx else set()
    out = {}
    for sec_name, sec in sections.items():
        if not sec_name.startswith(".nv.info."):
            continue
        entry = sec_name[len(".nv.info."):]
        if f".text.{entry}" not in sections:
            continue
        recs = parse_nv_info(sec.data())
        max_threads = None
        barriers = None
        for fmt, attr, payload in recs:
            if attr in (EIATTR_MAX_THREADS, EIATTR_REQNTID) and isinstance(payload, bytes) and len(payload) == 12:
                x, y, z = struct.unpack("<III", payload)
                n = max(x, 1) * max(y, 1) * max(z, 1)
                max_threads = n if max_threads is None else min(max_threads, n)
            elif attr == EIATTR_NUM_BARRIERS:
                barriers = payload if isinstance(payload, int) else struct.unpack_from("<I", payload)[0]
                barriers &= 0xFF
        if barriers is None:  # ABI v7 keeps the barrier count in the text section's flags
            barriers = (sections[f".text.{entry}"]["sh_flags"] >> 20) & 0x7F
        smem_sec = sections.get(f".nv.shared.{entry}")
        static_smem = int(smem_sec["sh_size"]) if smem_sec is not None else 0
        if reserved and smem_sec is not None:
            static_smem = max(0, static_smem - _RESERVED_BYTES)
        regs = by_name.get(EIATTR_REGCOUNT, {}).get(entry)
        if regs is None:
            raise CompileError(f"{entry}: no EIATTR_REGCOUNT record in the cubin's .nv.info")
        out[entry] = KernelResources(
            registers=int(regs),
            static_smem_bytes=static_smem,
            local_bytes=int(by_name.get(EIATTR_FRAME_SIZE, {}).get(entry, 0)),
            max_threads=max_threads,
            uses_grid_sync=entry in grid_sync_entries,
            barriers=int(barriers),
        )
    if not out:
        raise CompileError("cubin has no kernel entry points")
    return out
