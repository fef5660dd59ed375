"""A bounded fuzzer of artifact headers: 500 edits of a real artifact's header (each with a valid checksum, as
another writer or a hand edit would make it) must each end in a clean ArtifactError or run and give exactly the
original output -- no traceback, no silent wrong answer."""

from __future__ import annotations

import copy
import json
import mmap
import random
import time

import pytest

from ninferc.artifact import Artifact
from ninferc.errors import NinfercError

N_CASES = 500
_VALUES = [None, -1, 0, 1, 2**40, 1.5, -0.0, "x", "", True, [], {}, [1, 2], {"a": 1}, "bf16", "f32", 4096]


@pytest.fixture(scope="module")
def tiny_art(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model

    p = tmp_path_factory.mktemp("fuzz") / "tiny.ninfer"
    compile_model(tiny_dir, "sm_89", p, sku="l20", weights="w8")
    return p


def _nodes(obj, path=()):
    """Every (container, key) of a JSON tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield obj, k
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield obj, i
            yield from _nodes(v, path + (i,))


def _mutate(h: dict, rng: random.Random) -> str:
    """One edit, returned as a description."""
    op = rng.random()
    tensors = h.get("tensors", [])
    if op < 0.15 and len(tensors) > 2:  # payload-table edits of the kinds a silent wrong answer would need
        a, b = rng.sample(range(len(tensors)), 2)
        kind = rng.choice(["swap names", "relabel dtype", "point at another payload", "swap shapes"])
        if kind == "swap names":
            tensors[a]["name"], tensors[b]["name"] = tensors[b]["name"], tensors[a]["name"]
        elif kind == "relabel dtype":
            tensors[a]["dtype"] = rng.choice(["bf16", "f16", "i8", "u8", "f32", "i32"])
        elif kind == "point at another payload":
            tensors[a]["offset"], tensors[a]["sha256"] = tensors[b]["offset"], tensors[b]["sha256"]
        else:
            tensors[a]["shape"], tensors[b]["shape"] = tensors[b]["shape"], tensors[a]["shape"]
        return f"{kind} ({a}, {b})"
    top = rng.choice(sorted(h))  # a top-level field, then a random node inside it
    nodes = [(h, top)] + list(_nodes(h[top]))
    parent, key = rng.choice(nodes)
    old = parent[key]
    act = rng.choice(["delete", "replace", "nudge"])
    if act == "delete" and isinstance(parent, dict):
        del parent[key]
    elif act == "nudge" and isinstance(old, (int, float)) and not isinstance(old, bool):
        parent[key] = rng.choice([old + 1, old - 1, old * 2, -old, old + 0.5])
    elif act == "nudge" and isinstance(old, str):
        parent[key] = old + rng.choice(["x", "0", " "]) if rng.random() < 0.5 else old[:-1]
    elif act == "nudge" and isinstance(old, list) and old:
        parent[key] = old[:-1] if rng.random() < 0.5 else old + [copy.deepcopy(old[-1])]
    else:
        parent[key] = copy.deepcopy(rng.choice(_VALUES))
    return f"{act} {top}..{key!r}"


def _run(art: Artifact) -> list[int]:
    from ninferc.generate import generate
    from ninferc.reference_backend import ReferenceBackend
    from ninferc.sampling import SamplingParams

    tok = art.tokenizer()
    be = ReferenceBackend(art.config, art.weights(), graph=art.graph(), max_context=64)
    return generate(be, tok.encode("def f(x):\n"), max_new=4, params=SamplingParams()).ids


@pytest.mark.slow
def test_fuzzed_headers_fail_cleanly_or_run_unchanged(tiny_art):
    data = tiny_art.read_bytes()
    base = Artifact.open(tiny_art)
    want = _run(base)
    with open(tiny_art, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    rng = random.Random(20261205)
    t0 = time.monotonic()
    refused = accepted = 0
    for i in range(N_CASES):
        h = copy.deepcopy(base.header)
        what = _mutate(h, rng)
        hdr = json.dumps(h, separators=(",", ":")).encode()
        try:
            art = Artifact.from_header_bytes(tiny_art, hdr, len(data), lambda: mm)
        except NinfercError as exc:
            assert "Traceback" not in str(exc)
            refused += 1
            continue
        except Exception as exc:  # noqa: BLE001 -- the failure this test exists for
            pytest.fail(f"case {i} ({what}): {type(exc).__name__} instead of an ArtifactError: {exc}")
        accepted += 1
        try:
            got = _run(art)
        except NinfercError:
            continue  # a clean error at run time is acceptable too
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"case {i} ({what}): accepted, then {type(exc).__name__} while running: {exc}")
        assert got == want, f"case {i} ({what}): accepted and gave {got} instead of {want}"
    print(f"{N_CASES} edited headers: {refused} refused with a clean error, {accepted} accepted (same output); "
          f"{time.monotonic() - t0:.1f} s")
    assert refused > N_CASES // 2


def test_inspect_verify_reads_every_payload(tiny_art, tmp_path):
    import shutil

    from click.testing import CliRunner

    from ninferc.cli import main

    r = CliRunner().invoke(main, ["inspect", str(tiny_art), "--verify"])
    assert r.exit_code == 0 and "verified:" in r.output and "match their sha256" in r.output
    bad = tmp_path / "bad.ninfer"
    shutil.copy(tiny_art, bad)
    a = Artifact.open(bad)
    t = a.header["tensors"][-1]
    data = bytearray(bad.read_bytes())
    data[a.header["payload_offset"] + t["offset"] + 3] ^= 0x10
    bad.write_bytes(bytes(data))
    r = CliRunner().invoke(main, ["inspect", str(bad), "--verify"])
    assert r.exit_code == 2 and f"tensor {t['name']!r} is corrupt" in r.output
    r = CliRunner().invoke(main, ["inspect", "--preset", "qwen3.8-27b", "--verify"])
    assert r.exit_code == 2 and "--verify checks a .ninfer artifact" in r.output
