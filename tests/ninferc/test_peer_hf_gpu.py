"""The HF peer on the GPU: our params (CuPy, as the engine holds them) mapped to HF tensors through DLPack
reproduce the numpy mapping bit for bit, HF transformers' bf16 forward on them reproduces the goldens, the
engine's own uploaded params map identically, and ``run_hf_peer`` returns a well-formed result. Marked
``gpu`` (skipped without a GPU) and skipped without torch / transformers."""

from __future__ import annotations

import numpy as np
import pytest

from ninferc.ir.tolerances import HF_BF16_LOGITS
from ninferc.peer_hf import graph_config

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    t = pytest.importorskip("torch")
    tr = pytest.importorskip("transformers")
    pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5",
                        reason=f"transformers {tr.__version__} has no Qwen3.5")
    if not t.cuda.is_available():
        pytest.skip(f"torch {t.__version__} sees no CUDA device")
    return t


@pytest.fixture(scope="module")
def mapped(torch, tiny_ckpt):
    """(graph, numpy HF tensors, CuPy params, torch HF tensors) for the compiled fixture graph."""
    import cupy as cp

    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.weights import GraphWeights
    from ninferc.peer_hf import hf_tensors_from_params, hf_torch_tensors

    g = run_pipeline(build_graph(tiny_ckpt.config, lm_rows="last"))
    gw = GraphWeights(g, tiny_ckpt)
    host = {n: gw[n] for n in g.params}
    dev = {n: cp.asarray(a.view(np.uint16) if a.dtype.itemsize == 2 else a) for n, a in host.items()}
    return g, hf_tensors_from_params(g, host), dev, hf_torch_tensors(g, dev)


def _same_bits(torch, t, ref: np.ndarray) -> bool:
    return torch.equal(t.cpu().view(torch.int16), torch.from_numpy(np.ascontiguousarray(ref).view(np.int16)))


def test_dlpack_tensors_equal_numpy_mapping_and_share_memory(torch, mapped):
    g, hf_np, dev, hf = mapped
    assert set(hf) == set(hf_np)
    for name, t in hf.items():
        assert t.is_cuda and t.dtype == torch.bfloat16 and tuple(t.shape) == hf_np[name].shape, name
        assert _same_bits(torch, t, hf_np[name]), name
    up, fused = hf["model.layers.0.mlp.up_proj.weight"], dev["L0.mlp.gate_up"]
    at = fused.data.ptr + (fused.shape[0] // 2) * fused.shape[1] * 2
    assert up.data_ptr() == at  # a view, no copy
    from ninferc.peer_hf import build_hf_model

    m = build_hf_model(graph_config(g), hf)  # and the HF module reads the same memory
    assert m.model.layers[0].mlp.up_proj.weight.data_ptr() == at
    del m


def test_hf_bf16_logits_match_goldens(torch, mapped, goldens, tiny_ckpt):
    from ninferc.ir.tolerances import GREEDY_MARGIN
    from ninferc.peer_hf import hf_logits

    _, _, _, hf = mapped
    for ci, case in enumerate(goldens["cases"]):
        ids = case["prompt_ids"] + case["greedy_ids"][:-1]
        lg = hf_logits(tiny_ckpt.config, hf, ids)
        assert lg.dtype == np.float32 and lg.shape == (len(ids), tiny_ckpt.config.vocab_size)
        n0 = len(case["prompt_ids"]) - 1
        for i, top5 in enumerate(case["top5"]):
            row = lg[n0 + i]
            HF_BF16_LOGITS.check(row[[t for t, _ in top5]], [v for _, v in top5], f"case {ci} position {i}")
            if case["top1_margin"][i] > 2 * HF_BF16_LOGITS.atol + GREEDY_MARGIN:
                assert int(np.argmax(row)) == top5[0][0], f"case {ci} position {i}"


def test_engine_params_map_identically(torch, mapped, tiny_dir, tmp_path):
    """The bench's path: the params an Engine uploaded for an artifact of this device's arch."""
    from ninferc.artifact import Artifact
    from ninferc.peer_hf import hf_torch_tensors, run_hf_peer_on_engine
    from ninferc.pipeline import compile_model
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import device_arch, device_sm_count

    _, hf_np, _, _ = mapped
    p = tmp_path / "tiny.ninfer"
    compile_model(tiny_dir, device_arch(), p, sms=device_sm_count())
    e = Engine(Artifact.open(p), max_context=256, cuda_graph=False)
    hf = hf_torch_tensors(e.graph, e.params)
    assert set(hf) == set(hf_np)
    for name, t in hf.items():
        assert _same_bits(torch, t, hf_np[name]), name
    del hf
    r = run_hf_peer_on_engine(e, prompt_tokens=[8], decode_tokens=2, log=lambda s: None)
    assert r["decode"][0]["context"] == 8 and r["prefill"][0]["tok_s"] > 0


def test_run_hf_peer_result(torch, mapped, tiny_ckpt):
    from ninferc.peer_hf import run_hf_peer

    _, _, _, hf = mapped
    lines = []
    r = run_hf_peer(tiny_ckpt.config, hf, prompt_tokens=[16, 40], decode_tokens=4, log=lines.append)
    assert r["name"] == "hf-transformers" and r["version"] and r["torch"] == torch.__version__
    assert all(isinstance(r[k], (bool, type(None))) for k in ("fast_path", "fla", "causal_conv1d"))
    assert r["attn_implementation"] and len(r["fast_path_kernels"]) == 4
    assert [d["context"] for d in r["decode"]] == [16, 40]
    assert [p["prompt_tokens"] for p in r["prefill"]] == [16, 40]
    for d in r["decode"]:
        assert d["tok_s"] > 0 and d["median_ms"] > 0 and np.isfinite(d["tok_s"])
    for p in r["prefill"]:
        assert p["tok_s"] > 0 and p["ttft_ms"] >= p["prefill_s"] * 1e3 > 0
    assert r["peak_memory_bytes"] > 0 and lines
    # the shared weights are untouched and still usable
    assert all(t.is_cuda for t in hf.values())
