"""The HF peer's weight mapping (CPU, numpy only): compiled-graph params -> HF checkpoint tensors,
bit-exact against the fixture's safetensors; the HF config dict; ratios; errors. The tests at the end
need torch + transformers (skipped without them) and check the mapping through HF's own fp32 forward."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open

from ninferc.checkpoint import SKIPPED_PREFIXES
from ninferc.errors import NinfercError
from ninferc.ir.config import ModelConfig
from ninferc.ir.passes import run_pipeline
from ninferc.ir.qwen3_5 import build_graph, param_specs
from ninferc.ir.weights import GraphWeights
from ninferc.peer_hf import (
    _checkpoint_to_module_names,
    graph_config,
    hf_tensors_from_params,
    hf_text_config_dict,
    hf_weight_map,
    peer_ratios,
)

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def compiled(tiny_ckpt):
    """The compiled (fused, formatted) graph of the fixture and its params as numpy arrays."""
    g = run_pipeline(build_graph(tiny_ckpt.config, lm_rows="last"))
    gw = GraphWeights(g, tiny_ckpt)
    return g, {n: gw[n] for n in g.params}


def _checkpoint_tensors(tiny_dir) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(tiny_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="np") as s:
            for k in s.keys():
                if not any(k.startswith(p) for p in SKIPPED_PREFIXES):
                    out[k] = s.get_tensor(k)
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    assert a.dtype == BF16, a.dtype
    return np.ascontiguousarray(a).view(np.uint16)


def test_mapping_reproduces_every_checkpoint_tensor_bit_exactly(compiled, tiny_dir):
    g, params = compiled
    assert any(p.parts for p in g.params.values()), "the compiled graph should have fused params"
    assert {p.dtype for p in g.params.values()} == {"bf16", "f32"}
    hf = hf_tensors_from_params(g, params)
    ck = _checkpoint_tensors(tiny_dir)
    assert set(hf) == set(ck)  # every checkpoint tensor (but mtp / vision) covered, nothing invented
    for name, want in ck.items():
        got = hf[name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=name)


def test_engine_style_arrays_map_the_same(compiled):
    """The engine holds bf16 as uint16 bits and small params as fp32: same tensors, bf16 windows are views."""
    g, params = compiled
    eng = {n: (a.view(np.uint16) if a.dtype == BF16 else a) for n, a in params.items()}
    a, b = hf_tensors_from_params(g, params), hf_tensors_from_params(g, eng)
    for name in a:
        np.testing.assert_array_equal(_bits(a[name]), _bits(b[name]), err_msg=name)
    up = b["model.layers.0.mlp.up_proj.weight"]
    assert np.shares_memory(up, eng["L0.mlp.gate_up"])  # zero-copy row window of the fused param
    np.testing.assert_array_equal(_bits(up), eng["L0.mlp.gate_up"][704:])


def test_weight_map_windows(compiled):
    g, _ = compiled
    m = {e.hf_name: e for e in hf_weight_map(g)}
    q, k, v = (m[f"model.layers.3.self_attn.{x}_proj.weight"] for x in "qkv")
    assert q.param == k.param == v.param == "L3.attn.q_k_v"
    assert (q.rows, k.rows, v.rows) == ((0, 512), (512, 640), (640, 768))
    a = m["model.layers.0.linear_attn.in_proj_a.weight"]
    assert (a.param, a.rows, a.ir_name) == ("L0.gdn.in_qkv_in_z_in_b_in_a", (1030, 1036), "L0.gdn.in_a")
    conv = m["model.layers.0.linear_attn.conv1d.weight"]
    assert (conv.hf_shape, conv.dtype) == ((640, 1, 4), "f32")
    assert m["lm_head.weight"].param == "lm_head" and m["model.norm.weight"].param == "final_norm"


def test_hf_config_dict_matches_the_fixture_config_json(tiny_dir, tiny_ckpt):
    raw = json.loads((tiny_dir / "config.json").read_text())
    d = hf_text_config_dict(tiny_ckpt.config)
    for k, v in d.items():
        if k in raw:
            assert raw[k] == v, k
    assert set(d) - set(raw) == set()
    back = ModelConfig.from_hf_dict(d)
    assert replace(back, name=tiny_ckpt.config.name) == tiny_ckpt.config


def test_multimodal_prefix_and_tied_embeddings(tiny_dir):
    raw = json.loads((tiny_dir / "config.json").read_text())
    vl = {"model_type": "qwen3_5", "tie_word_embeddings": True,
          "text_config": {k: v for k, v in raw.items() if k not in ("model_type", "tie_word_embeddings")}}
    cfg = ModelConfig.from_hf_dict(vl)
    g = run_pipeline(build_graph(cfg, lm_rows="last"))
    assert graph_config(g) == cfg
    names = [e.hf_name for e in hf_weight_map(g)]
    assert "lm_head.weight" not in names and "model.language_model.embed_tokens.weight" in names
    assert all(n.startswith("model.language_model.") for n in names)


def test_module_name_matching_by_suffix_and_errors(tiny_ckpt):
    cfg = replace(tiny_ckpt.config, weight_prefix="model.language_model.")
    ck = {"model.language_model.embed_tokens.weight": 0, "model.language_model.norm.weight": 0, "lm_head.weight": 0}
    expected = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    assert _checkpoint_to_module_names(expected, ck, cfg, None) == {
        "model.embed_tokens.weight": "model.language_model.embed_tokens.weight",
        "model.norm.weight": "model.language_model.norm.weight", "lm_head.weight": "lm_head.weight"}
    tied = {k: 0 for k in list(ck)[:2]}
    assert _checkpoint_to_module_names(expected, tied, cfg, "model.language_model.embed_tokens.weight")[
        "lm_head.weight"] == "model.language_model.embed_tokens.weight"
    with pytest.raises(NinfercError) as ei:
        _checkpoint_to_module_names(expected + ["model.layers.0.foo.weight"],
                                    {**ck, "model.language_model.bar": 0}, cfg, None)
    assert "model.layers.0.foo.weight" in str(ei.value) and "model.language_model.bar" in str(ei.value)


def test_errors_name_the_param(compiled):
    g, params = compiled
    with pytest.raises(NinfercError, match="L0.mlp.gate_up is missing"):
        hf_tensors_from_params(g, {k: v for k, v in params.items() if k != "L0.mlp.gate_up"})
    with pytest.raises(NinfercError, match=r"L0.mlp.down: array shape \[2, 2\]"):
        hf_tensors_from_params(g, {**params, "L0.mlp.down": np.zeros((2, 2), np.float32)})
    gq = g.copy()
    gq.params["L0.mlp.down"] = replace(gq.params["L0.mlp.down"], dtype="w8")
    with pytest.raises(NinfercError, match=r"runs the bf16 model.*L0.mlp.down \(w8\)"):
        hf_weight_map(gq)


def test_peer_ratios():
    ours = {"decode": [{"context": 512, "tok_s": 20.0}, {"context": 8192, "tok_s": 18.0}],
            "prefill": [{"prompt_tokens": 512, "tok_s": 6000.0, "ttft_ms": 90.0}]}
    peer = {"decode": [{"context": 512, "tok_s": 10.0}], "prefill": [{"prompt_tokens": 512, "tok_s": 3000.0,
                                                                      "ttft_ms": 170.0}]}
    r = peer_ratios(ours, peer)
    assert r["decode"] == [{"context": 512, "tok_s": 20.0, "peer_tok_s": 10.0, "ratio": 2.0}]
    assert r["prefill"][0]["ratio"] == 2.0 and r["prefill"][0]["peer_ttft_ms"] == 170.0


def test_import_is_torch_free():
    code = ("import sys, ninferc.peer_hf; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'imported eagerly'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_missing_torch_is_a_clear_error(monkeypatch, tiny_ckpt):
    from ninferc import peer_hf

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(NinfercError, match="needs PyTorch"):
        peer_hf.run_hf_peer(tiny_ckpt.config, {}, prompt_tokens=[16], decode_tokens=4)
    with pytest.raises(NinfercError, match="needs PyTorch"):
        peer_hf.hf_torch_tensors(None, {})


# ---- with torch + transformers (CPU): HF's own forward on the mapped weights -------------------------
def _hf_or_skip():
    pytest.importorskip("torch")
    tr = pytest.importorskip("transformers")
    pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5", reason=f"transformers {tr.__version__} "
                        "has no Qwen3.5")


def test_hf_fp32_forward_on_mapped_weights_reproduces_goldens(compiled, goldens, tiny_ckpt):
    """HF's float32 forward (the goldens' own setting) on the tensors mapped back from our compiled params
    reproduces every golden top-5 logit to REFERENCE_LOGITS: the mapping is exact, not merely close."""
    _hf_or_skip()
    from ninferc.ir.tolerances import REFERENCE_LOGITS
    from ninferc.peer_hf import hf_logits, hf_torch_tensors

    g, params = compiled
    hf = hf_torch_tensors(g, params)
    for ci, case in enumerate(goldens["cases"]):
        ids = case["prompt_ids"] + case["greedy_ids"][:-1]
        lg = hf_logits(tiny_ckpt.config, hf, ids, device="cpu", dtype="float32")
        n0 = len(case["prompt_ids"]) - 1
        for i, top5 in enumerate(case["top5"]):
            REFERENCE_LOGITS.check(lg[n0 + i][[t for t, _ in top5]], [v for _, v in top5], f"case {ci} pos {i}")


def test_hf_model_builds_for_tied_multimodal_config(tiny_dir):
    _hf_or_skip()
    from ninferc.peer_hf import build_hf_model, fast_path_report, hf_torch_tensors

    raw = json.loads((tiny_dir / "config.json").read_text())
    vl = {"model_type": "qwen3_5", "tie_word_embeddings": True,
          "text_config": {k: v for k, v in raw.items() if k not in ("model_type", "tie_word_embeddings")}}
    cfg = ModelConfig.from_hf_dict(vl)
    rng = np.random.default_rng(0)
    src = {n: (rng.standard_normal(s.shape) * 0.05).astype(BF16) for n, s in param_specs(cfg).items()}
    g = run_pipeline(build_graph(cfg, lm_rows="last"))
    gw = GraphWeights(g, src)
    m = build_hf_model(cfg, hf_torch_tensors(g, {n: gw[n] for n in g.params}), device="cpu")
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    assert not any(b.is_meta for b in m.buffers()) and not any(p.is_meta for p in m.parameters())
    fp = fast_path_report()
    assert set(fp) == {"fast_path", "fla", "causal_conv1d", "kernels"} and len(fp["kernels"]) == 4
    import importlib.util

    if importlib.util.find_spec("fla") is None:  # the torch reference, reported as such
        assert fp["fla"] is False and fp["fast_path"] is False
        assert fp["kernels"]["torch_chunk_gated_delta_rule"] == "torch reference"


def test_fast_path_probe_sees_a_kernel_package(tmp_path):
    """With an importable ``fla`` (a stand-in here) transformers binds its delta-rule kernels at import
    time; the probe must report them (the wrappers' names are copied from the torch fallbacks)."""
    _hf_or_skip()
    pkg = tmp_path / "fla" / "ops" / "gated_delta_rule"
    pkg.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("")
    (tmp_path / "fla" / "ops" / "__init__.py").write_text("")
    sig = "(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None)"
    (pkg / "__init__.py").write_text(f"def chunk_gated_delta_rule{sig}: pass\n"
                                     f"def fused_recurrent_gated_delta_rule{sig}: pass\n")
    code = "import json; from ninferc.peer_hf import fast_path_report; print(json.dumps(fast_path_report()))"
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    fp = json.loads(r.stdout.strip().splitlines()[-1])
    assert fp["fla"] is True, fp
    assert fp["kernels"]["torch_chunk_gated_delta_rule"] == "fla.ops.gated_delta_rule.chunk_gated_delta_rule"
