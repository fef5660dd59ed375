"""Render kernel templates (jinja2) into self-contained CUDA C sources.

Templates (``*.cu.j2``) and shared headers (``*.cuh``) live in the installed ``ninferc.templates``
package. Rendering is strict (undefined parameters are errors). After rendering, every
``#include "<name>.cuh"`` that names one of our headers is replaced by the header's text (once per
source, ``#pragma once`` honoured) between begin/end marker comments, so NVRTC diagnostics carry line
numbers of the rendered source, which :mod:`ninferc.targets.nvrtc` writes to disk on failure.

The result needs no include path at all: the runtime can compile the artifact's stored source on the
device with the device's NVRTC, and the source hash covers the headers. Angle-bracket includes and
includes of unknown files are errors: NVRTC from pip ships no CUDA or C headers (see
../shared/notes/cubin-resources.md).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

import jinja2

from ninferc.errors import CompileError

TEMPLATE_PACKAGE = "ninferc.templates"
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"][^\n]*$', re.M)
_PRAGMA_ONCE_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*\n?", re.M)


def _template_dir():
    return resources.files(TEMPLATE_PACKAGE)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(_load_template_text)
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
        autoescape=False,
    )


def _load_template_text(name: str) -> str:
    path = _template_dir() / name
    if not path.is_file():
        raise jinja2.TemplateNotFound(name)
    return path.read_text(encoding="utf-8")


def template_names() -> list[str]:
    """File names of all kernel templates (``*.cu.j2``) in ``ninferc.templates``, sorted."""
    return sorted(p.name for p in _template_dir().iterdir() if p.name.endswith(".cu.j2"))


def header_names() -> list[str]:
    """File names of all shared headers (``*.cuh``) in ``ninferc.templates``, sorted."""
    return sorted(p.name for p in _template_dir().iterdir() if p.name.endswith(".cuh"))


def include_names() -> list[str]:
    """File names of all jinja includes (``*.inc.j2``: macros and text several templates share) in
    ``ninferc.templates``, sorted."""
    return sorted(p.name for p in _template_dir().iterdir() if p.name.endswith(".inc.j2"))


def read_template_file(name: str) -> str:
    """Raw text of a template or header file in ``ninferc.templates``.

    Raises:
        CompileError: no such file (names it and lists what exists).
    """
    path = _template_dir() / name
    if not path.is_file():
        raise CompileError(
            f"no template or header {name!r} in {TEMPLATE_PACKAGE}; have: "
            + ", ".join(template_names() + header_names())
        )
    return path.read_text(encoding="utf-8")


def _inline_headers(text: str, origin: str, seen: set[str]) -> str:
    """Replace our ``#include "x.cuh"`` lines by the header text, recursively, once per header."""
    out: list[str] = []
    pos = 0
    for m in _INCLUDE_RE.finditer(text):
        out.append(text[pos:m.start()])
        pos = m.end()
        kind, name = m.group(1), m.group(2).strip()
        line_no = text.count("\n", 0, m.start()) + 1
        if kind == "<" or name not in header_names():
            raise CompileError(
                f"{origin}:{line_no}: #include {kind}{name}{'>' if kind == '<' else chr(34)} is not "
                f"allowed: NVRTC from pip ships no CUDA/C headers; only our own headers can be "
                f"included ({', '.join(header_names())})"
            )
        if name in seen:
            out.append(f"// (#include \"{name}\" already inlined above)")
            continue
        seen.add(name)
        body = _PRAGMA_ONCE_RE.sub("", read_template_file(name), count=1)
        body = _inline_headers(body, name, seen)
        out.append(f"// ---- begin {name} (inlined by ninferc) ----\n{body.rstrip()}\n"
                   f"// ---- end {name} ----")
    out.append(text[pos:])
    return "".join(out)


def render_template(template: str, params: Mapping[str, Any]) -> str:
    """Render ``template`` with ``params`` and inline our headers.

    Args:
        template: file name in ``ninferc.templates`` (e.g. ``"gemv_fma.cu.j2"``).
        params: template parameters (the kernel's identity); every parameter the template uses must
            be given (StrictUndefined).

    Returns:
        A self-contained CUDA C source (str) that needs no include path.

    Raises:
        CompileError: unknown template, undefined parameter, or a forbidden include (message names
            the template and the problem).
    """
    try:
        tmpl = _environment().get_template(template)
    except jinja2.TemplateNotFound:
        raise CompileError(
            f"no kernel template {template!r} in {TEMPLATE_PACKAGE}; have: {', '.join(template_names())}"
        ) from None
    try:
        text = tmpl.render(**dict(params))
    except jinja2.UndefinedError as exc:
        raise CompileError(f"rendering {template} with {dict(params)}: {exc}") from None
    header = f"// rendered by ninferc from {template}: " + ", ".join(
        f"{k}={v}" for k, v in sorted(params.items())
    )
    return f"{header}\n" + _inline_headers(text, template, set())


def source_hash(source: str) -> str:
    """sha256 hex digest of a rendered source (UTF-8); covers inlined headers by construction."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()
