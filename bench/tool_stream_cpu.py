"""CPU timing of the server's streamed tool calls (``ninferc.server.tools.ToolCallSplitter``, qwen3_coder and hermes):
one call whose string argument is SIZE characters of code (a coding agent's ``write_file``), fed 4 characters at a
time (about a token's text), the streamed entries collected as a client would. Reports seconds per size, to show
whether the cost grows linearly with the argument (it did not before 2026-12-07: each piece was added to the call's
string).

Usage: ``python3 bench/tool_stream_cpu.py [--sizes 100000,400000,1600000] [--json bench/results/F.json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from ninferc.bench import git_commit
from ninferc.server.tools import ToolCallSplitter

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
LINE = "line of code = 1 + 2  # comment\n"  # 32 characters


def timed(parser: str, size: int, piece: int = 4) -> float:
    """Seconds to stream a ``parser`` call with a ``size``-character argument in ``piece``-character feeds (checked:
    the entries add up to the call's arguments, whose content is the argument)."""
    body = LINE * (size // len(LINE))
    if parser == "hermes":
        text = "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": {"path": "a.py", "content": body}}) \
            + "\n</tool_call>"
    else:
        text = ("<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\n"
                f"{body}\n</parameter>\n</function>\n</tool_call>")
    sp, parts = ToolCallSplitter(parser, TOOLS), []
    t0 = time.perf_counter()
    for i in range(0, len(text), piece):
        parts += [e["function"]["arguments"] for e in sp.feed(text[i:i + piece])[1]]
    parts += [e["function"]["arguments"] for e in sp.flush()[1]]
    dt = time.perf_counter() - t0
    args = "".join(parts)
    if args != sp.calls[0].arguments or json.loads(args)["content"] != body:
        raise SystemExit("tool_stream_cpu: the streamed entries do not add up to the call")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,400000,1600000")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes must be comma-separated integers, found {a.sizes!r}")
    if min(sizes) < len(LINE):
        ap.error(f"--sizes must be at least {len(LINE)} characters each (one line of code), found {min(sizes)}")
    rows = [{"parser": p, "size_chars": s, "seconds": timed(p, s)} for p in ("qwen3_coder", "hermes") for s in sizes]
    for r in rows:
        us = r["seconds"] / r["size_chars"] * 1e6
        print(f"{r['parser']:>11} {r['size_chars']:>9} characters: {r['seconds']:.3f} s ({us:.2f} us per character)")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "tool": "bench/tool_stream_cpu.py", "command": " ".join(["bench/tool_stream_cpu.py", *sys.argv[1:]]),
            "commit": git_commit(), "host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows},
            indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
