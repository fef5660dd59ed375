"""README.md's result tables are what ``bench/readme_table.py`` prints from the result files README cites: a table
edited by hand, or a result file replaced without regenerating the table, fails here; and the quick start's compile
lines are what ``ninferc compile`` prints."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def _tool():
    spec = importlib.util.spec_from_file_location("readme_table", REPO / "bench" / "readme_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _tables(markdown: str) -> list[list[str]]:
    """The markdown's tables, each its run of consecutive ``|`` lines."""
    out, cur = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out, cur = out + [cur], []
    return out


def _assert_in_readme(markdown: str, *cited: str) -> None:
    readme = (REPO / "README.md").read_text()
    for name in cited:
        assert name in readme, f"README no longer cites {name}: update this test with the table's new sources"
    tables = _tables(markdown)
    assert tables
    for lines in tables:
        start = readme.find(lines[0] + "\n")
        assert start >= 0, f"README lacks the table headed {lines[0]!r}"
        body = readme[start:].splitlines()[:len(lines)]
        assert body == lines, "README's table differs from bench/readme_table.py's output:\n" + "\n".join(
            f"- {a}\n+ {b}" for a, b in zip(body, lines) if a != b)


def test_decode_prefill_table():
    files = ["bf16_h200_b5c6e59.json", "bf16_32k_h200_6b4fccc.json", "w8_h200_87f9b0c_p2.json", "w4_h200_7afdac6.json"]
    out = _tool().table([_load(f) for f in files], peer=_load("bf16_h200_6b4fccc.json"))
    _assert_in_readme(out, *files)


def test_serving_table():
    files = [("bf16", "serve_27b_bf16_h200_20a5964.json"), ("w4", "serve_27b_w4_h200_20a5964.json")]
    _assert_in_readme(_tool().serve_table([(w, _load(f)) for w, f in files], "H200"), *(f for _, f in files))


def test_mtp_table():
    for device, rows in (("H200", (("bf16", "20a5964"), ("bf16_draftw4", "20a5964"), ("w4", "20a5964"))),
                         ("H100", (("bf16", "1e2c649"), ("bf16_draftw4", "1e2c649"), ("w8", "1e2c649"), ("w4", "1e2c649")))):
        files = [f"mtp_27b_{w}_{device.lower()}_{commit}.json" for w, commit in rows]
        _assert_in_readme(_tool().mtp_table([_load(f) for f in files], device), *files)


def test_serving_table_h100():
    files = [("bf16", "serve_27b_bf16_h100_1e2c649.json"), ("w4", "serve_27b_w4_h100_1e2c649.json")]
    _assert_in_readme(_tool().serve_table([(w, _load(f)) for w, f in files], "H100"), *(f for _, f in files))


def test_serving_table_refuses_results_of_different_levels():
    a = _load("serve_27b_bf16_h100_f92dbe8.json")
    b = dict(a, levels=a["levels"][:2])
    with pytest.raises(ValueError, match="concurrency levels"):
        _tool().serve_table([("bf16", a), ("w4", b)], "H100")


def test_quick_start_compile_output(tmp_path, monkeypatch):
    """The quick start's ``ninferc compile`` lines (graph, plan, MTP, bytes written) are what that command prints today:
    a plan that gains or loses kernels, or an artifact that changes size, without the README following fails here
    (both had gone stale once, found by a fresh-user trial on 2026-12-06)."""
    from click.testing import CliRunner

    from ninferc.cli import main

    readme = (REPO / "README.md").read_text()
    start = readme.index("$ ninferc compile $M --target sm_90 --sku h200 -o tiny.ninfer\n")
    block = readme[start:readme.index("$ ninferc run", start)].splitlines()[1:]
    assert [line.split(" ")[0] for line in block] == ["graph:", "plan:", "mtp:", "wrote"], block
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["compile", str(REPO / "tests" / "fixtures" / "qwen35-tiny-code"), "--target", "sm_90",
                                  "--sku", "h200", "-o", "tiny.ninfer"])
    assert r.exit_code == 0, r.output
    printed = [line.strip() for line in r.output.replace("\r", "\n").splitlines()
               if line.startswith(("graph:", "plan:", "mtp:", "wrote "))]
    assert printed == block, f"README's quick start shows {block}, ninferc compile printed {printed}"
