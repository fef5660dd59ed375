"""`ninferc compile` of the fixture for each arch's reference SKU, and the reference backend on each
artifact reproduces the goldens (the artifact's compiled graph and tensors, not the checkpoint)."""

import importlib.util

import numpy as np
import pytest
from click.testing import CliRunner

from ninferc.artifact import Artifact
from ninferc.testing import ARCH_SKUS
from ninferc.cli import main
from ninferc.ir.reference import ReferenceExecutor
from ninferc.ir.tolerances import GREEDY_MARGIN, REFERENCE_LOGITS

TARGETS = list(ARCH_SKUS.items())


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, tiny_dir):
    d = tmp_path_factory.mktemp("art")
    out = {}
    for arch, sku in TARGETS:
        p = d / f"tiny_{arch}.ninfer"
        r = CliRunner().invoke(main, ["compile", str(tiny_dir), "--target", arch, "--sku", sku, "-o", str(p)])
        assert r.exit_code == 0, r.output
        out[arch] = p
    return out


@pytest.mark.parametrize("arch,sku", TARGETS)
def test_reference_backend_on_artifact_reproduces_goldens(artifacts, goldens, arch, sku):
    art = Artifact.open(artifacts[arch])
    assert (art.header["target"]["arch"], art.header["target"]["sku"]) == (arch, sku)
    art.verify_all()
    g = art.graph()
    assert "GatedDeltaNet" in g.count_ops()  # the compiled (fused) graph, run on the artifact's tensors
    ex = ReferenceExecutor(g, art.weights())
    for ci, case in enumerate(goldens["cases"]):
        st = ex.new_state()
        logits = ex.forward(case["prompt_ids"], st)[-1]
        n = next((i for i, m in enumerate(case["top1_margin"]) if m < GREEDY_MARGIN), len(case["top1_margin"]))
        out = []
        for i in range(n):
            top5 = case["top5"][i]
            REFERENCE_LOGITS.check(logits[[t for t, _ in top5]], [v for _, v in top5], f"{arch} case {ci} step {i}")
            out.append(int(np.argmax(logits)))
            logits = ex.forward([out[-1]], st)[-1]
        assert out == case["greedy_ids"][:n]


def test_cli_run_reference_on_artifact(artifacts, goldens):
    case = goldens["cases"][0]
    r = CliRunner().invoke(main, ["run", str(artifacts["sm_89"]), "--backend", "reference", "--prompt",
                                  case["prompt"], "--max-new", "17"])
    assert r.exit_code == 0, r.output
    from ninferc.tokenizer import Tokenizer
    from ninferc.testing import models_dir

    want = Tokenizer.from_dir(models_dir() / "qwen35-tiny-code").decode(case["greedy_ids"][:17])
    assert r.stdout.startswith(want)


def test_plan_error_names_kernel_and_limit(tiny_dir, tmp_path):
    """A max context whose split-KV combine needs more shared memory than the arch allows fails in the
    planner, naming the kernel, the target, the value and the limit (the CLI refuses such a context earlier,
    as beyond the model's positions: next test)."""
    from ninferc.errors import PlanError
    from ninferc.ir.config import ModelConfig
    from ninferc.targets.model_plan import plan_for_config

    with pytest.raises(PlanError) as e:
        plan_for_config(ModelConfig.from_dir(tiny_dir), "sm_89", sku="l20", max_context=200_000_000)
    msg = str(e.value)
    assert "attn_combine" in msg and "sm_89" in msg and "101376" in msg


@pytest.mark.parametrize("cmd", ["compile", "plan", "run"])
def test_max_context_beyond_the_model_positions_is_refused(tiny_dir, tmp_path, cmd):
    args = {"compile": ["compile", str(tiny_dir), "--target", "sm_89", "--sku", "l20", "-o", str(tmp_path / "x.ninfer")],
            "plan": ["plan", "--target", "sm_89", "--sku", "l20", str(tiny_dir)],
            "run": ["run", str(tiny_dir), "--prompt", "abc", "--max-new", "1"]}[cmd]
    r = CliRunner().invoke(main, [*args, "--max-context", "8193"])
    assert r.exit_code == 2 and "--max-context 8193 is outside 1..8192" in r.output, r.output
    assert "max_position_embeddings" in r.output and "Traceback" not in r.output


def test_run_defaults_to_the_artifacts_compiled_context(tiny_dir, tmp_path):
    """`run` without --max-context holds what the artifact was compiled for (here 16 tokens), so a prompt
    that does not fit is refused with that number."""
    out = tmp_path / "small.ninfer"
    r = CliRunner().invoke(main, ["compile", str(tiny_dir), "--target", "sm_89", "--sku", "l20", "-o", str(out),
                                  "--max-context", "16"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["run", str(out), "--backend", "reference", "--prompt", "abc", "--max-new", "20"])
    assert r.exit_code == 2 and "over the context of 16 tokens (the artifact was compiled for" in r.output, r.output
    # and `inspect` says so before anything is run
    r = CliRunner().invoke(main, ["inspect", str(out)])
    assert r.exit_code == 0 and "compiled for: max context 16 tokens" in r.output and "KV page 64 tokens" in r.output, \
        r.output


@pytest.mark.parametrize("args,needle", [
    (["run", "{tiny}", "--prompt", "abc", "--max-context", "4", "--max-new", "4"], "over --max-context 4"),
    (["run", "{tiny}", "--prompt", "abc", "--max-new", "0"], "'--max-new': 0 is not in the range x>=1"),
    (["run", "{tiny}", "--prompt", "abc", "--temperature", "1", "--seed", "-1"],
     "seed must be an integer in [0, 2**64), found -1"),
    (["run", "{tiny}", "--prompt", "abc", "--temperature", "1", "--seed", str(2**64)], "seed must be an integer"),
    (["run", "{tiny}", "--prompt", "abc", "--temperature", "1e-320"], "temperature must be 0 (greedy) or in [1e-05, 100]"),
    (["run", "{tiny}", "--prompt", "abc", "--temperature", "inf"], "found inf"),
    (["run", "{tiny}", "--prompt", "abc", "--greedy", "--top-p", "0.5"],
     "--top-p 0.5 applies only when sampling (--temperature > 0)"),
    (["run", "{tiny}", "--prompt", "abc", "--top-k", "3", "--seed", "5"],
     "--top-k 3 and --seed 5 apply only when sampling"),
    (["run", "{tiny}", "--prompt", "abc", "--temperature", "1", "--top-k", "100000"],
     "--top-k 100000 is more than the vocabulary (4096 tokens)"),
    (["run", "{tiny}", "--prompt", "abc", "--no-cuda-graph"], "--no-cuda-graph applies to the cuda backend"),
    (["run", "{tiny}", "--prompt", "abc", "--stop", "x", "--stop", ""], "--stop '' is an empty string"),
    (["serve"], "give exactly one of a .ninfer file, a checkpoint directory, or --preset NAME --synthetic-weights"),
    (["serve", "{tiny}", "--preset", "qwen3.8-27b", "--synthetic-weights"], "give exactly one of"),
    (["serve", "--preset", "qwen3.8-27b"], "--preset needs --synthetic-weights"),
    (["serve", "--preset", "qwen9", "--synthetic-weights"], "unknown preset 'qwen9'; known presets: ['qwen3.8-27b']"),
    (["serve", "{tiny}", "--weights", "w4"], "--synthetic-weights/--weights/--kv-dtype apply to --preset"),
    (["serve", "--preset", "qwen3.8-27b", "--synthetic-weights", "--backend", "reference"],
     "runs on the cuda backend only"),
    (["serve", "--preset", "qwen3.8-27b", "--synthetic-weights", "--max-context", "10000000"], "10000000"),
    # a pool smaller than one request of the context: refused at startup, as vLLM does (it admitted no chat request
    # without max_tokens: the default, the rest of the context, never fit; 2026-12-06)
    (["serve", "{tiny}", "--kv-capacity", "1024"], "--kv-capacity 1024 tokens (16 KV pages of 64) cannot hold one "
     "request of the context, 4096 tokens (64 pages): pass --kv-capacity 4096 or more, or --max-context 1024 or less"),
    (["serve", "{tiny}", "--kv-capacity", "63"], "--kv-capacity 63 is less than one KV page (64 tokens)"),
    (["serve", "{tiny}", "--no-prefix-cache", "--prefix-cache-gib", "1"],
     "--prefix-cache-gib applies to the prefix cache, which --no-prefix-cache turns off"),
    (["run", "{tiny}", "--prompt", "abc", "--max-context", "512", "--prefill-chunk", "1024"],
     "--prefill-chunk 1024 is more than --max-context 512"),
    (["run", "{tiny}", "--prompt", "abc", "--prefill-chunk", "99999"],
     "--prefill-chunk 99999 is more than the default max context 4096"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "/nonexistent-dir/x.ninfer"],
     "folder /nonexistent-dir does not exist"),
    # what temp file + rename would replace, or where the folder cannot be found (a FIFO became a regular file and a
    # symlink loop was a traceback until 2026-12-06)
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "/dev/null"],
     "-o /dev/null: is a character device, not a regular file"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "{loop}"], "is a symbolic link loop"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "{fifo}"], "is a FIFO, not a regular file"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "{loop}/x.ninfer"], "symbolic link loop"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "x.ninfer", "--dump-ir", "{tiny}/config.json"],
     "config.json: exists and is not a directory"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "x.ninfer", "--dump-ir",
      "{tiny}/config.json/sub"], "cannot create the directory"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "h200", "-o", "x.ninfer"],
     "SKU 'h200' (NVIDIA H200 SXM) is sm_90, not the requested target sm_89"),
    (["plan", "--target", "sm_89", "--sku", "l20", "--preset", "qwen3.8-27b", "--page-size", "0"],
     "KV page size 0 must be a positive multiple of 32 tokens"),
    (["plan", "--target", "sm_89", "--sku", "l20", "--preset", "qwen3.8-27b", "--page-size", "16"],
     "KV page size 16 must be a positive multiple of 32 tokens"),
    (["compile", "{tiny}", "--target", "sm_89", "--sku", "l20", "-o", "x.ninfer", "--page-size", "48"],
     "KV page size 48 must be a positive multiple of 32 tokens"),
])
def test_cli_rejects_bad_input_clearly(tiny_dir, tmp_path, args, needle):
    import os

    loop, fifo = tmp_path / "loop1", tmp_path / "out.fifo"
    os.symlink(tmp_path / "loop2", loop)
    os.symlink(loop, tmp_path / "loop2")
    os.mkfifo(fifo)
    r = CliRunner().invoke(main, [a.format(tiny=tiny_dir, loop=loop, fifo=fifo) for a in args])
    assert r.exit_code == 2 and needle in r.output, r.output
    assert "Traceback" not in r.output
    if "KV page size" in needle:
        assert "graph:" not in r.output  # refused before the graph is built, not after


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="the message of a machine without CuPy")
def test_serve_preset_with_spec_mtp_gets_as_far_as_the_gpu():
    """The preset's synthetic artifact carries an MTP head (synthetic too), so ``--spec mtp`` passes the argument
    checks and stops only where the weights need a GPU (it was refused as "the artifact carries no MTP head" until
    2026-12-07: bench/NOTES.md run 289)."""
    r = CliRunner().invoke(main, ["serve", "--preset", "qwen3.8-27b", "--synthetic-weights", "--spec", "mtp",
                                  "--draft-lm-head", "w4"])
    assert r.exit_code == 2, r.output
    assert "(its weights are generated on the GPU) needs CuPy and an NVIDIA GPU" in r.output, r.output
    assert "MTP" not in r.output, r.output


def test_compile_refuses_to_overwrite_its_own_checkpoint(tiny_dir, tmp_path):
    """``-o`` naming one of the checkpoint's files -- directly, or the blob a Hugging Face cache's link points to -- is
    refused before the compile, and the file is left as it was (it was overwritten, 2026-12-07)."""
    import os
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(tiny_dir, ck)
    snap = tmp_path / "snapshot"  # a cache's layout: links in the snapshot folder, the bytes in blobs
    snap.mkdir()
    for f in ck.iterdir():
        os.symlink(f, snap / f.name)
    shard = next(f for f in ck.iterdir() if f.name.endswith(".safetensors"))
    for model, out in ((ck, ck / "config.json"), (ck, ck / shard.name), (snap, ck / shard.name),
                       (snap, snap / shard.name)):
        before = out.read_bytes()
        r = CliRunner().invoke(main, ["compile", str(model), "--target", "sm_89", "--sku", "l20", "-o", str(out)])
        assert r.exit_code == 2 and f"is the checkpoint's own file {out.name}" in r.output, r.output
        assert "graph:" not in r.output and out.read_bytes() == before
    r = CliRunner().invoke(main, ["compile", str(ck), "--target", "sm_89", "--sku", "l20", "-o",
                                  str(ck / "model.ninfer")])  # a new file in the folder is fine
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, needle", [
    (("bench",), "exactly one of ARTIFACT or --preset"),
    (("bench", "--preset", "qwen3.8-27b"), "--preset needs --synthetic-weights"),
    (("bench", "x.ninfer", "--weights", "w4"), "apply to --preset"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--weights", "w4", "--recipe", "mlpx=w4"),
     "bad override"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--prompt-tokens", "5l2"), "comma-separated integers"),
    (("bench", "missing.ninfer"), "'missing.ninfer' does not exist (expected a .ninfer artifact file)"),
    (("bench", "{tiny}"), "a directory, not a .ninfer artifact file"),  # a checkpoint directory is not one
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--target", "sm_75"), "unknown target 'sm_75'"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--target", "sm_89", "--sku", "h200"),
     "SKU 'h200' (NVIDIA H200 SXM) is sm_90, not the requested target sm_89"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--sku", "rtx9999"), "unknown SKU 'rtx9999'"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--prompt-tokens", "300000"),
     "a KV capacity of 300136 is outside 1..262144"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--prompt-tokens", "16,,32"),
     "comma-separated integers, found '16,,32'"),
    (("bench", "x.ninfer", "--sku", "l20"), "--target/--sku apply to --preset"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--json", "/"), "--json /: is a directory"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--json", "/dev/zero"),
     "--json /dev/zero: is a character device"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--json", "/nonexistent-dir/r.json"),
     "folder /nonexistent-dir does not exist"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--recipe", "mlp=w8,mlp=w4"),
     "--recipe 'mlp=w8,mlp=w4': mlp is given twice"),
    (("bench", "--preset", "qwen3.8-27b", "--synthetic-weights", "--weights", "w4", "--recipe", "embedding=w4"),
     "the embedding gather reads bf16 or w8"),  # the pipeline's check, also before the GPU's
    (("inspect", "missing.ninfer"), "'missing.ninfer' does not exist (expected a .ninfer artifact)"),
    (("inspect", "missing.bin"), "'missing.bin' does not exist (expected a checkpoint directory, a .ninfer artifact"),
])
def test_bench_and_inspect_check_arguments_before_the_gpu(tiny_dir, args, needle):
    """Argument errors come first, one line, exit 2 -- not the no-GPU message (CI has no GPU, so without
    these checks coming first every row would print the CuPy install hint instead)."""
    r = CliRunner().invoke(main, [a.format(tiny=tiny_dir) for a in args])
    assert r.exit_code == 2 and needle in r.output, r.output
    assert "needs CuPy" not in r.output and "Traceback" not in r.output


def test_run_accepts_sampling_defaults_given_explicitly_when_greedy(tiny_dir):
    """Only sampling options set away from their defaults are refused under greedy decoding (they would be
    ignored); a script that spells out the defaults runs."""
    r = CliRunner().invoke(main, ["run", str(tiny_dir), "--prompt", "abc", "--max-new", "2", "--greedy", "--top-k", "0",
                                  "--top-p", "1.0", "--seed", "0"])
    assert r.exit_code == 0, r.output


def test_bench_refuses_an_artifact_context_past_its_model(tmp_path, tiny_dir):
    """An artifact's model was trained for max_position_embeddings positions (8,192 for the fixture): the
    default 512,8192 prompts + 2 x 64 decode steps go past it, and bench says so before looking for a GPU."""
    out = tmp_path / "t.ninfer"
    r = CliRunner().invoke(main, ["compile", str(tiny_dir), "--target", "sm_89", "--sku", "l20", "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["bench", str(out)])
    assert r.exit_code == 2 and "a KV capacity of 8328 is outside 1..8192" in r.output, r.output


def test_compile_refuses_a_context_no_prompt_fits(tiny_dir, tmp_path):
    r = CliRunner().invoke(main, ["compile", str(tiny_dir), "--target", "sm_89", "--sku", "l20", "-o",
                                  str(tmp_path / "x.ninfer"), "--max-context", "1"])
    assert r.exit_code == 2 and "'--max-context': 1 is not in the range x>=2" in r.output, r.output
    assert not (tmp_path / "x.ninfer").exists()
    from ninferc.errors import NinfercError
    from ninferc.pipeline import compile_model

    with pytest.raises(NinfercError, match="--max-context 1 leaves no room for a prompt token and a generated one"):
        compile_model(tiny_dir, "sm_89", tmp_path / "y.ninfer", sku="l20", max_context=1)
    assert not (tmp_path / "y.ninfer").exists()


@pytest.mark.parametrize("spec", [(), ("--spec", "mtp", "--draft-tokens", "1")])
def test_run_timing_line_of_one_token_has_no_decode_rate(tiny_dir, spec):
    """One generated token has no decode interval: ``run``'s timing line says ``decode -`` (as the server's log line
    does), not ``nan tok/s``; with two tokens it is a rate. Plain and speculative paths."""
    for n, want in ((1, "decode -"), (2, " tok/s")):
        r = CliRunner().invoke(main, ["run", str(tiny_dir), "--backend", "reference", "--prompt", "def f():",
                                      "--max-new", str(n), "--ignore-eos", *spec])
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.stderr.splitlines() if ln.startswith("prompt "))
        assert f"generated {n} (length)" in line and "nan" not in line and line.endswith(want), line
        if spec:
            assert "1 draft per round: " + ("no rounds" if n == 1 else "1 round, 1 drafted") in r.stderr, r.stderr
