"""``ninferc plan``: table and JSON output, and the errors a user can cause."""

import json

import pytest
from click.testing import CliRunner

from ninferc.cli import main
from ninferc.targets.skus import typical_sku

from ninferc.testing import models_dir

pytestmark = pytest.mark.slow  # seconds each on 2 cores: `pytest -m "not slow"` skips them


TINY = models_dir() / "qwen35-tiny-code"
KEYS = {"kernel", "uri", "threads_per_cta", "registers", "static_smem_bytes", "dynamic_smem_bytes", "local_bytes",
        "ctas_per_sm", "limiter", "cooperative", "coop_cap", "grids"}


def run(*args):
    return CliRunner().invoke(main, ["plan", *args])


def test_json_shape_27b_l20():
    r = run("--target", "sm_89", "--sku", "L20", "--preset", "qwen3.8-27b", "--tokens", "1", "--tokens", "16",
            "--batch", "1", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["target"], d["sku"], d["sms"]) == ("sm_89", "l20", 92)
    names = {k["kernel"] for k in d["kernels"]}
    for want in ("embed", "L0.gdn.in_qkv_in_z_in_b_in_a", "L0.gdn.mixer.decode", "L0.gdn.mixer.core",
                 "L3.attn.q_k_v", "L3.attn.mixer.decode", "L3.attn.mixer.prefill", "L0.mlp.gate_up", "L0.mlp.down",
                 "final_norm", "lm_head", "sample.argmax"):
        assert want in names, want
    for k in d["kernels"]:
        assert KEYS <= set(k)
        for g in k["grids"]:
            assert {"tokens", "ctas", "waves", "route", "mode"} <= set(g)
            assert g["tokens"] in ((1,) if g["mode"] == "decode" else (1, 16))
            if k["cooperative"]:
                assert g["ctas"] <= k["coop_cap"] and g["waves"] == 1


def test_table_with_sms_only():
    r = run("--target", "sm_90", "--sms", "100", "--preset", "qwen3.8-27b")
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[2]
    for col in ("step", "block", "regs", "smem", "local", "CTAs/SM", "limiter", "B=1", "T=1024", "cap",
                "waves", "route"):
        assert col in head
    assert "100 SMs" in r.output.splitlines()[0]
    # no SKU: the first line names the card whose bandwidth per SM the cost model assumes
    assert f"the {typical_sku('sm_90').name}'s: the median of the sm_90 SKUs" in r.output.splitlines()[0]
    # the default prefill columns stop at --max-context (4096): no 8,192-token chunk fits that context
    assert "T=8192" not in head


def test_default_prefill_columns_follow_max_context():
    r = run("--target", "sm_90", "--sms", "100", "--preset", "qwen3.8-27b", "--max-context", "8192", "--batch", "1",
            "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["prefill_tokens"] == [1, 64, 1024, 8192]
    r = run("--target", "sm_90", "--sms", "100", "--preset", "qwen3.8-27b", "--max-context", "32", "--batch", "1",
            "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["prefill_tokens"] == [1]


def test_model_dir():
    r = run(str(TINY), "--target", "sm_120a", "--sku", "rtx 5060 ti", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["sms"] == 36 and any(k["kernel"] == "L0.mlp.gate_up" for k in d["kernels"])


def test_draft_tokens_plans_the_verify_steps():
    """``--draft-tokens K``: each decode batch B's speculative verify step (B x (K + 1) tokens, mode ``verify``) is
    planned beside decode and prefill -- the GDN layers' verify conv, verify core (its columns split over CTAs where
    one per head leaves SMs idle: the fixture's 6 heads on 36 SMs split, and the gated norm follows) and no prefill
    core; columns V=4 / V=8 in the table. Without the option no verify grid exists (the plan goldens' shape)."""
    args = (str(TINY), "--target", "sm_120a", "--sku", "rtx 5060 ti", "--batch", "1", "--batch", "2", "--tokens", "1")
    d = json.loads(run(*args, "--draft-tokens", "3", "--json").output)
    assert d["draft_tokens"] == 3
    verify = {k["kernel"]: k for k in d["kernels"] if any(g["mode"] == "verify" for g in k["grids"])}
    assert {"L0.gdn.mixer.conv_verify", "L0.gdn.mixer.verify", "L0.gdn.mixer.verify_norm", "lm_head"} <= set(verify)
    assert not any(n.endswith((".core", ".ring", ".wy")) for n in verify)
    core = [g for g in verify["L0.gdn.mixer.verify"]["grids"] if g["mode"] == "verify"]
    assert [(g["tokens"], g["route"]) for g in core] == [(4, "verify_split"), (8, "verify_split")]
    plain = json.loads(run(*args, "--json").output)
    assert "draft_tokens" not in plain and not any(g["mode"] == "verify" for k in plain["kernels"] for g in k["grids"])
    r = run(*args, "--draft-tokens", "3")
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[2]
    assert "V=4" in head and "V=8" in head and "a speculative verify step of n tokens" in r.output


@pytest.mark.parametrize("args, needle", [
    (("--target", "sm_89", "--preset", "qwen3.8-27b"), "give --sku NAME or --sms N"),
    (("--target", "sm_89", "--sku", "h200", "--preset", "qwen3.8-27b"), "sm_90, not the requested target sm_89"),
    (("--target", "sm_89", "--sku", "rtx9999", "--preset", "qwen3.8-27b"), "known SKUs for sm_89"),
    (("--target", "sm_75", "--sms", "40", "--preset", "qwen3.8-27b"), "supported targets"),
    (("--target", "sm_89", "--sms", "92", "--preset", "nope"), "unknown preset"),
    (("--target", "sm_89", "--sms", "100000", "--preset", "qwen3.8-27b"),
     "SM count 100000 is more than sm_89's largest die has (AD102: 144 SMs"),
    (("--target", "sm_89", "--sms", "92"), "exactly one of MODEL_DIR or --preset"),
    (("--target", "sm_89", "--sms", "92", "/nonexistent-dir"), "does not exist"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--weights", "w4", "--recipe", "embedding=w4"),
     "the embedding gather reads bf16 or w8"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--recipe", "mlpx=w4"), "--recipe 'mlpx=w4': bad override"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--recipe", "mlp=w8,mlp=w4"),
     "mlp is given twice (mlp=w8 and mlp=w4)"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--kv-dtype", "fp8"), "'fp8' is not one of"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--tokens", "1", "--tokens", "100000"),
     "--tokens 100000 is more than --max-context 4096"),
    (("--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--draft-tokens", "6"),
     "6 is not in the range 1<=x<=5"),
])
def test_errors_are_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.exit_code == 2 and needle in r.output, r.output


def test_explain_lists_the_compared_gemv_variants_best_first():
    """``--explain``: per GEMV launch of the matching steps, the candidates best first by the cost model, the first
    the kernel the plan launches (the JSON's records agree), layers of one problem folded; in the table, an H100 and
    an H200 (same 132 SMs, other bandwidth per SM) can choose differently, and the text says by how much."""
    args = ("--target", "sm_90", "--preset", "qwen3.8-27b", "--tokens", "64", "--batch", "1", "--batch", "4",
            "--draft-tokens", "3")
    r = run(*args, "--sku", "h200", "--json", "--explain", "*mlp*")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    chosen = {(k["kernel"], g["mode"], g["tokens"]): k["uri"] for k in d["kernels"] for g in k["grids"]}
    recs = d["explain"]
    assert {(x["mode"], x["tokens"]) for x in recs} == {("decode", 1), ("decode", 4), ("verify", 4)}  # V=16: GEMM
    assert all(".mlp." in x["step"] for x in recs) and any(x["steps"] > 1 for x in recs)
    for x in recs:
        assert chosen[(x["step"], x["mode"], x["tokens"])] == x["chosen"]
        est = [c["estimate_us"] for c in x["candidates"]]
        assert len(est) >= 2 and x["candidates"][0]["uri"] == x["chosen"] and est == sorted(est)
    texts = {}
    for sku in ("h100sxm", "h200"):
        r = run(*args, "--sku", sku, "--explain", "L0.gdn.in_*")
        assert r.exit_code == 0, r.output
        texts[sku] = r.output[r.output.index("\nwhy ("):]
        assert "L0.gdn.in_qkv_in_z_in_b_in_a: gemv K=5120 N=16480 store bf16, decode B=1 (T = 1 in the GEMV)" in texts[sku]
        assert texts[sku].count("\n    * ") == texts[sku].count(": gemv K=")  # one chosen mark per launch
    assert "25.4 GB/s of DRAM bandwidth per SM" in texts["h100sxm"] and "36.4 GB/s" in texts["h200"]
    first = {sku: t.split("\n    * ")[1].split("\n")[0].split()[-1] for sku, t in texts.items()}
    assert first["h100sxm"] != first["h200"]  # th256 k4 against th128 k4 (the 2026-12-07 trial's question)
    r = run(*args, "--sku", "h200", "--explain", "nothing*")  # a typo: an error naming it and the step names' form
    assert r.exit_code == 2 and "--explain 'nothing*' matches none of the plan's" in r.output, r.output
    assert "'L0.mlp.*'" in r.output
    r = run(*args, "--sku", "h200", "--explain", "L0.gdn.mixer.*")  # steps with no GEMV: said so
    assert r.exit_code == 0 and "no GEMV launch in the steps matching 'L0.gdn.mixer.*'" in r.output, r.output


def test_explain_folds_columns_not_layers_and_says_why_a_dp_tile_falls_back():
    """An LM head's prefill launches (one logits row for every T) are one record serving every T column, one step
    (a trial read "and 2 more layers like it"); where the 4-token dp variants cannot be resident (the 27B w4 down's x,
    152,320 B, against sm_89's 101,376 B per CTA), the note says so and the tensor-core variants compared follow."""
    r = run(str(TINY), "--target", "sm_90", "--sku", "h200", "--json", "--explain", "lm_head")
    assert r.exit_code == 0, r.output
    pre = [x for x in json.loads(r.output)["explain"] if x["mode"] == "prefill"]
    assert len(pre) == 1 and pre[0]["steps"] == 1 and pre[0]["tokens"] == 1
    assert pre[0]["columns"] == ["T=1", "T=64", "T=1024"]
    r = run("--preset", "qwen3.8-27b", "--weights", "w4", "--target", "sm_89", "--sku", "l20", "--batch", "4",
            "--tokens", "64", "--explain", "L0.mlp.down")
    assert r.exit_code == 0, r.output
    text = r.output[r.output.index("\nwhy ("):]
    assert ("no 4-token dp variant has a resident CTA on sm_89 (each stages 152,320 B of x in shared memory; a CTA "
            "may take 101,376 B): the 4-token tensor-core variants run it, compared") in text
    chosen = text.split("\n    * ")[1].split("\n")[0].split()[-1]
    assert "_tok4_mma1_" in chosen and chosen in r.output[:r.output.index("\nwhy (")]  # the table's kernel
    # the other fallback: the w8 down's 8-token x fits no CTA on sm_90 either; the 4-token dp tile runs it in chunks
    r = run("--preset", "qwen3.8-27b", "--weights", "w8", "--target", "sm_90", "--sku", "h200", "--batch", "8",
            "--tokens", "64", "--explain", "L0.mlp.down")
    assert r.exit_code == 0, r.output
    assert ("no 8-token dp variant has a resident CTA on sm_90 (each stages 287,232 B of x in shared memory; a CTA may "
            "take 232,448 B): the 4-token dp tile runs it in 2 token chunks, its variants compared") in r.output
    assert "\n    *   " in r.output and "_dp1_add_norm_parts_tok4_" in r.output.split("\n    *   ")[1].split("\n")[0]
