"""End-to-end on the GPU: each arch's artifact (its plan replayed on the device) reproduces the HF
goldens; graph == eager; paged KV over garbage == contiguous reference; chunked == unchunked prefill;
our occupancy == the driver's for every loaded kernel. Marked ``gpu`` (skipped without a GPU)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ninferc.ir.tolerances import ENGINE_LOGITS, ENGINE_REORDER, GREEDY_MARGIN
from ninferc.sampling import SamplingParams
from ninferc.testing import ARCH_SKUS as ARCHS

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams()


def greedy_prefix_len(margins) -> int:
    return next((i for i, m in enumerate(margins) if m < GREEDY_MARGIN), len(margins))


def check_top5(row, top5, what):
    row = np.asarray(row, np.float32).reshape(-1)
    ENGINE_LOGITS.check(row[[t for t, _ in top5]], [v for _, v in top5], what)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory, tiny_dir):
    from ninferc.pipeline import compile_model

    out = {}
    d = tmp_path_factory.mktemp("art")
    for arch, sku in ARCHS.items():
        p = d / f"tiny_{arch}.ninfer"
        compile_model(tiny_dir, arch, p, sku=sku)
        out[arch] = p
    return out


_ENGINES = {}


def engine(path, **kw):
    from ninferc.artifact import Artifact
    from ninferc.runtime.engine import Engine

    key = (str(path), tuple(sorted(kw.items())))
    if key not in _ENGINES:
        kw.setdefault("plan", "replay")
        _ENGINES[key] = Engine(Artifact.open(path), **kw)
    return _ENGINES[key]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_goldens_short(artifacts, goldens, arch):
    e = engine(artifacts[arch])
    s = e.session()
    for ci, case in enumerate(goldens["cases"]):
        # teacher forced: prefill the prompt, then feed the golden ids one by one
        logits = s.prefill(case["prompt_ids"], 1024)
        for i, top5 in enumerate(case["top5"]):
            check_top5(logits.get(), top5, f"{arch} case {ci} position {i}")
            if i + 1 < len(case["top5"]):
                logits = s.decode(case["greedy_ids"][i])
        # free running, greedy on the GPU (graph replay of model + sampler)
        n = greedy_prefix_len(case["top1_margin"])
        s.prefill(case["prompt_ids"], 1024)
        out = []
        for _ in range(n):
            out.append(s.sample(GREEDY))
            s.decode(out[-1])
        assert out == case["greedy_ids"][:n], f"{arch} case {ci}: {out} vs {case['greedy_ids'][:n]}"


@pytest.mark.parametrize("arch", list(ARCHS))
def test_goldens_long(artifacts, goldens_long, arch):
    e = engine(artifacts[arch], max_logit_rows=64)
    s = e.session()
    ids = goldens_long["prompt_ids"]
    at = {int(k): v for k, v in goldens_long["prompt_top5_at"].items()}
    rows = s.prefill(ids, 1024, logit_rows=sorted(at))
    for r, pos in zip(rows, sorted(at)):
        check_top5(r, at[pos], f"{arch} prompt position {pos}")
    # continuation: last prompt logits, then teacher-forced decode
    logits = s.prefill(ids, 1024)
    for i, top5 in enumerate(goldens_long["top5"]):
        check_top5(logits.get(), top5, f"{arch} continuation {i}")
        if i + 1 < len(goldens_long["top5"]):
            logits = s.decode(goldens_long["greedy_ids"][i])
    n = greedy_prefix_len(goldens_long["top1_margin"])
    s.prefill(ids, 1024)
    out = []
    for _ in range(n):
        out.append(s.sample(GREEDY))
        s.decode(out[-1])
    assert out == goldens_long["greedy_ids"][:n]


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=7)])
def test_graph_equals_eager(artifacts, goldens, params):
    prompt = goldens["cases"][0]["prompt_ids"]
    toks = {}
    for graph in (True, False):
        e = engine(artifacts["sm_90"], cuda_graph=graph)
        s = e.session()
        s.prefill(prompt, 1024)
        out = []
        for _ in range(40):
            out.append(s.sample(params))
            s.decode(out[-1])
        toks[graph] = out
    assert toks[True] == toks[False]


@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=7)])
def test_decode_stream_equals_the_step_loop(artifacts, goldens, params, graph):
    """decode_stream (one step queued ahead of the id read back) yields the ids of decode/sample steps; stopped
    early, the session is where decode(last id) + sample would leave it, and it continues from there."""
    prompt = goldens["cases"][1]["prompt_ids"]
    e = engine(artifacts["sm_90"], cuda_graph=graph)

    def start():  # a new session uploads its sampling parameters at its first sample: the RNG starts over
        s = e.session()
        s.prefill(prompt, 1024)
        return s, [s.sample(params)]

    s, want = start()
    for _ in range(30):
        s.decode(want[-1])
        want.append(s.sample(params))
    s.close()
    s, got = start()
    got += list(s.decode_stream(params, 30))
    assert got == want
    s.close()
    s, got = start()
    for t in s.decode_stream(params, 30):
        got.append(t)
        if len(got) == 12:
            break
    assert s.seq.length == len(prompt) + 12  # the queued step appended the last id read
    got.append(s.sample(params))            # ... and sampled the next one
    for _ in range(5):
        s.decode(got[-1])
        got.append(s.sample(params))
    s.close()
    assert got == want[:len(got)]


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=11)])
def test_decode_stream_leaves_the_metadata_to_the_device(artifacts, goldens, params, monkeypatch):
    """A long decode_stream with its KV pages reserved up front: between uploads the replayed steps run on the
    metadata their sampler advanced on the device (positions, context lengths, id cursors), an upload comes only
    when a cursor's half of the pinned id block is full (every SAMPLED_IDS_LD / 2 steps) -- and the ids are the
    eager step loop's (no graph: decode(tok); sample() uploads the metadata every step)."""
    from ninferc.runtime.engine import Engine
    from ninferc.targets.lower import SAMPLED_IDS_LD

    prompt = goldens["cases"][0]["prompt_ids"]
    e = engine(artifacts["sm_90"])
    n = 150

    s = engine(artifacts["sm_90"], cuda_graph=False).session()
    s.prefill(prompt, 1024, reserve=n + 8)
    want = [s.sample(params)]
    for _ in range(n):
        s.decode(want[-1])
        want.append(s.sample(params))
    s.close()

    uploads = []
    real = Engine.write_meta
    monkeypatch.setattr(Engine, "write_meta", lambda self, **kw: (uploads.append(kw["tok_pos"]), real(self, **kw)))
    s = e.session()
    s.prefill(prompt, 1024, reserve=n + 8)
    got = [s.sample(params)]
    before = len(uploads)
    got += list(s.decode_stream(params, n))
    streamed = len(uploads) - before
    s.close()
    assert got == want
    # one upload at the start, then one per full half of the id block
    assert streamed == 1 + (n - 1) // (SAMPLED_IDS_LD // 2), streamed


def _reference_logits(tiny_ckpt, ids):
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.reference import ReferenceExecutor

    ex = ReferenceExecutor(build_graph(tiny_ckpt.config), tiny_ckpt)
    return ex.forward(ids, ex.new_state())


def test_paged_kv_over_garbage_equals_contiguous_reference(artifacts, goldens_long, tiny_ckpt):
    """Decode at contexts one below, at and one above a page boundary, and at 4096, with every KV page
    and GDN slot filled with large garbage first: logits equal the contiguous-KV numpy reference."""
    e = engine(artifacts["sm_89"], max_context=4160)
    P = e.page_size
    for name, st in e.states.items():  # poison every pool: KV pages and GDN slots
        for arr in (st.values() if isinstance(st, dict) else [st]):
            arr.view(np.uint16 if arr.dtype == np.uint16 else np.uint32)[...] = 0x7F7F if arr.dtype == np.uint16 else 0x7F7F7F7F
    ids = (goldens_long["prompt_ids"] * 2)[:4097]
    ref = _reference_logits(tiny_ckpt, ids[:4096])
    s = e.session()
    for ctx in (P - 1, P, P + 1, 2 * P + 1):
        s.prefill(ids[:ctx - 2], 1024)
        for t in range(ctx - 2, ctx):  # two decode steps, the last at context `ctx`
            logits = s.decode(ids[t])
        ENGINE_LOGITS.check(logits.get()[0], ref[ctx - 1], f"context {ctx}")
    s.prefill(ids[:4095], 1024)
    logits = s.decode(ids[4095])
    ENGINE_LOGITS.check(logits.get()[0], ref[4095], "context 4096")


@pytest.mark.parametrize("split", [(1024, 1), (512, 513), (1000, 25)])
def test_chunked_prefill_equals_unchunked(artifacts, goldens_long, split):
    e = engine(artifacts["sm_90"], prefill_chunk=1025, max_logit_rows=8)
    ids = goldens_long["prompt_ids"][:1025]
    s = e.session()
    full = s.prefill(ids, 1025, logit_rows=[1023, 1024])
    nxt_full = s.decode(ids[0]).get()
    s2 = e.session()
    a, _ = split
    rows = s2.prefill(ids, a, logit_rows=[1023, 1024])
    nxt = s2.decode(ids[0]).get()
    ENGINE_REORDER.check(rows, full, f"split {split} logits")
    ENGINE_REORDER.check(nxt, nxt_full, f"split {split} next-step logits (GDN state + KV carried)")


def test_occupancy_matches_driver_for_every_kernel(artifacts):
    """Our calculator equals cuOccupancyMaxActiveBlocksPerMultiprocessor for every loaded kernel at
    several block sizes (up to its max threads) and dynamic shared sizes; cubin registers/shared equal
    the driver's attributes."""
    from ninferc.targets.cubin import read_resources
    from ninferc.targets.occupancy import occupancy

    e = engine(artifacts["sm_90"])
    bad = []
    for uri, k in e.kernels.items():
        attrs = k.attributes()
        cub = read_resources(k.compiled.cubin, k.arch, k.compiled.ptx)[k.entry]
        if (cub.registers, cub.static_smem_bytes) != (attrs.registers, attrs.static_smem_bytes):
            bad.append(f"{uri}: cubin {cub.registers} regs/{cub.static_smem_bytes} B, driver {attrs.registers}/"
                       f"{attrs.static_smem_bytes}")
        for threads in sorted({32, 128, min(256, attrs.max_threads), attrs.max_threads}):
            for dyn in (0, 8192, 40000):
                if attrs.static_smem_bytes + dyn > e.dev_arch_obj.max_smem_per_cta_optin:
                    continue
                ours = occupancy(e.dev_arch_obj, threads, attrs.registers, attrs.static_smem_bytes, dyn,
                                 barriers=cub.barriers).ctas_per_sm
                drv = k.driver_occupancy(threads, dyn)
                if ours != drv:
                    bad.append(f"{uri} threads={threads} dyn={dyn}: ours {ours}, driver {drv}")
    assert not bad, "\n".join(bad[:40])


def test_replayed_plan_keeps_its_grids(artifacts):
    """The L20 plan replayed on the H200 launches exactly the grids its artifact recorded."""
    from ninferc.artifact import Artifact

    art = Artifact.open(artifacts["sm_89"])
    e = engine(artifacts["sm_89"])
    recorded = {}
    for rec in art.header["plan"]["kernels"]:
        for g in rec["grids"]:
            recorded[(rec["kernel"], g["mode"], g["tokens"])] = (rec["uri"], g["ctas"], g["route"])
    checked = 0
    for mode, T in (("decode", 1), ("prefill", 64), ("prefill", 1024)):
        for step, ln, _, _ in e.step_plan(mode, T, 1 if mode == "prefill" else T, 1).launches:
            key = (step.name, mode, T)
            if key in recorded:
                assert recorded[key] == (ln.kernel.uri, ln.ctas, ln.route), key
                checked += 1
    assert checked > 50


def test_cli_run_prints_golden_text(artifacts, goldens):
    case = goldens["cases"][2]
    n = greedy_prefix_len(case["top1_margin"])
    r = subprocess.run([sys.executable, "-m", "ninferc", "run", str(artifacts["sm_90"]), "--prompt", case["prompt"],
                        "--max-new", str(n), "--ignore-eos"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    from ninferc.tokenizer import Tokenizer
    from ninferc.testing import models_dir

    want = Tokenizer.from_dir(models_dir() / "qwen35-tiny-code").decode(case["greedy_ids"][:n])
    assert r.stdout == want + "\n"
    assert "decode" in r.stderr and "tok/s" in r.stderr


def test_folded_norm_program_equals_the_unfused_one(artifacts, goldens):
    """The decode step with every norm between two Linears folded into their GEMVs (the engine's program) and
    the same artifact lowered with every norm as its own kernel (``lower(fuse_norm=False)``, kernels compiled
    by ``Engine.use_program``): teacher-forced decode logits agree (x is
    rounded to bf16 before the norm's 1/rms in one, after it in the other), and the folded program launches
    no rmsnorm kernel between two Linears. The bound is ENGINE_LOGITS (the bf16-storage error itself: moving
    where one bf16 rounding happens is bounded by it); the H200 measured 0.082 (runs 27-34)."""
    from ninferc.artifact import Artifact
    from ninferc.runtime.engine import Engine
    from ninferc.targets.lower import lower

    e = Engine(Artifact.open(artifacts["sm_90"]), cuda_graph=False)
    case = goldens["cases"][0]
    out = {}
    folded = e.program
    unfused = lower(e.graph, page_size=e.page_size, max_context=e.max_context, fuse_norm=False)
    for name, prog in (("folded", folded), ("unfused", unfused)):
        e.use_program(prog)
        norms = [s for s, *_ in e.step_plan("decode", 1, 1, 1).launches if s.family == "rmsnorm"]
        assert len(norms) == (2 if name == "folded" else 2 * e.config.num_hidden_layers + 1), [s.name for s in norms]
        s = e.session()
        logits = s.prefill(case["prompt_ids"], 1024)
        rows = []
        for tok in case["greedy_ids"][:12]:
            logits = s.decode(tok)
            rows.append(logits.get())
        out[name] = np.stack(rows)
        s.close()
    ENGINE_LOGITS.check(out["folded"], out["unfused"], "folded vs unfused norm, decode logits")


def test_batched_decode_reproduces_the_goldens(artifacts, goldens):
    """The five golden cases decoded together (B = 5: a full 4-token tile plus a partial one in every GEMV, five GDN
    slots, five page tables of different lengths): teacher forced, every row's logits match the goldens' top-5 at
    every position; then free running on the replayed B = 5 graph (model + greedy sampler), every sequence's ids
    match its golden greedy ids up to the first near-tie."""
    cases = goldens["cases"]
    B = len(cases)  # noqa: N806
    e = engine(artifacts["sm_90"], max_batch=B)
    sessions = [e.session() for _ in range(B)]
    first = [s.prefill(c["prompt_ids"], 1024).get()[0] for s, c in zip(sessions, cases)]
    for ci, c in enumerate(cases):
        check_top5(first[ci], c["top5"][0], f"batched case {ci} position 0")
    steps = min(len(c["top5"]) for c in cases)
    for i in range(1, steps):
        rows = e.decode_batch(sessions, [c["greedy_ids"][i - 1] for c in cases]).get()
        assert rows.shape[0] == B
        for ci, c in enumerate(cases):
            check_top5(rows[ci], c["top5"][i], f"batched case {ci} position {i}")
    # free running: restart every sequence, one eager step from the prompts' golden first ids, then graph replays
    n = min(greedy_prefix_len(c["top1_margin"]) for c in cases)
    for s, c in zip(sessions, cases):
        s.prefill(c["prompt_ids"], 1024)
    got = [[c["greedy_ids"][0]] for c in cases]
    e.decode_batch(sessions, [g[0] for g in got])
    for _ in range(1, n):
        for g, t in zip(got, e.batch_tokens(B)):
            g.append(t)
        e.decode_batch(sessions, None)
    for ci, c in enumerate(cases):
        assert got[ci][:n] == c["greedy_ids"][:n], f"batched case {ci}: {got[ci][:n]} vs {c['greedy_ids'][:n]}"
    for s in sessions:
        s.close()


def _teacher_forced_then_greedy(e, prompts, tokens):
    """Prefill ``prompts`` (one session each, chunks of 1,024), decode ``tokens`` teacher-forced (one step of all
    sessions per token) and, for one session, 24 greedy steps after them: (each step's logits as ``decode_batch``
    (B > 1) / ``decode`` (B = 1) return them, stacked; the greedy ids), the sessions closed."""
    batch = len(prompts)
    sessions = [e.session() for _ in range(batch)]
    for s, p in zip(sessions, prompts):
        s.prefill(p, 1024)
    rows = [e.decode_batch(sessions, [tok] * batch).get() if batch > 1 else sessions[0].decode(tok).get()
            for tok in tokens]
    greedy = []
    if batch == 1:
        s = sessions[0]
        for _ in range(24):
            greedy.append(s.sample(GREEDY))
            s.decode(greedy[-1])
    for s in sessions:
        s.close()
    return np.stack(rows), greedy


@pytest.mark.parametrize("tile", [0, 32, -1], ids=["page", "tile32", "mma"])
@pytest.mark.parametrize("batch", [1, 3])
def test_staged_attention_decode_equals_the_global_one(tmp_path, tiny_dir, goldens_long, batch, tile):
    """``attn_decode`` with its K/V tiles through shared memory (``AttnDecodeFamily.stage_kv``: cp.async copies, the
    first tile's earlier rows before the PDL wait) in the device-planned engine, PDL-chained: the teacher-forced decode
    logits of the long golden prompt equal, bit for bit, those of the engine on the default attention decode kernel
    (the same arithmetic in the same order; only where K and V are read from differs; 32-key tiles: within
    ENGINE_REORDER, their online softmax rescales per tile), for one sequence and for
    ``batch`` sequences of different lengths together; then 24 graph-replayed greedy steps give the same ids (page
    tiles: all 24; the reassociating tiles: those before the golden greedy's first near-tie, whose top-1 margin is
    below GREEDY_MARGIN -- at position 28 of the long golden it is 0.005, and run 142's engines split there).
    ``tile``: keys per staged tile (``stage_keys``; 0 = a page; -1: page tiles on tensor cores, ``stage_mma``)."""
    from ninferc.artifact import Artifact
    from ninferc.pipeline import compile_model
    from ninferc.runtime.engine import Engine
    from ninferc.targets.kernels import FAMILIES

    fam = FAMILIES["attn_decode"]
    default = fam.stage_kv, fam.stage_keys, fam.stage_mma
    ids = goldens_long["prompt_ids"]
    prompts = [ids[: len(ids) - 37 * b] for b in range(batch)]  # different contexts, page boundaries apart
    out = {}
    try:
        for stage in (False, True):
            # the artifact's kernels and the engine's launches follow the family's attributes
            fam.stage_kv, fam.stage_keys, fam.stage_mma = stage, max(tile, 0), tile < 0
            path = tmp_path / f"tiny_sm_90_stage{int(stage)}.ninfer"
            compile_model(tiny_dir, "sm_90", path, sku="h200")
            e = Engine(Artifact.open(path), max_batch=batch, plan="device")
            uris = {ln.kernel.uri for _, ln, *_ in e.step_plan("decode", batch, batch, batch).launches
                    if ln.kernel.family == "attn_decode"}
            assert uris and all(("stage" in u) == stage for u in uris), uris
            out[stage] = _teacher_forced_then_greedy(e, prompts, goldens_long["greedy_ids"][:16])
    finally:
        fam.stage_kv, fam.stage_keys, fam.stage_mma = default
    if tile == 0:  # a page per tile: the same online-softmax steps as the global kernel
        np.testing.assert_array_equal(out[True][0], out[False][0], "staged vs global attention decode: decode logits")
    else:  # 32-key tiles: the softmax rescales per tile (H200: max 0.030, run 122); mma: q and P as bf16 hi + lo
        ENGINE_REORDER.check(out[True][0], out[False][0], f"staged (tile {tile}) vs global: decode logits")
    forced = len(goldens_long["greedy_ids"][:16])
    n = 24 if tile == 0 else greedy_prefix_len(goldens_long["top1_margin"][forced:forced + 24])
    assert out[True][1][:n] == out[False][1][:n], f"greedy ids differ within the first {n} steps"


@pytest.mark.parametrize("batch", [1, 3])
def test_decode_with_prep_folded_equals_the_prep_launch(tmp_path, tiny_dir, goldens_long, batch):
    """``AttnDecodeFamily.fuse_prep``: the decode step launches no attn_prep (the staged decode kernel computes q and
    the new K / V row itself; prefill still runs attn_prep) and its teacher-forced decode logits of the long golden
    prompt match the engine with the attn_prep launch within ENGINE_REORDER (the same arithmetic, the RoPE's
    cos / sin through attn_common.cuh rope_cos_sin in both), for one sequence and ``batch`` of different lengths; 24 greedy steps give the same
    ids."""
    from ninferc.artifact import Artifact
    from ninferc.pipeline import compile_model
    from ninferc.runtime.engine import Engine
    from ninferc.targets.kernels import FAMILIES

    fam = FAMILIES["attn_decode"]
    default = fam.stage_kv, fam.fuse_prep
    ids = goldens_long["prompt_ids"]
    prompts = [ids[: len(ids) - 37 * b] for b in range(batch)]
    out = {}
    try:
        for fused in (False, True):
            fam.stage_kv, fam.fuse_prep = True, fused
            path = tmp_path / f"tiny_sm_90_prep{int(fused)}.ninfer"
            compile_model(tiny_dir, "sm_90", path, sku="h200")
            e = Engine(Artifact.open(path), max_batch=batch, plan="device")
            fams = [ln.kernel.family for _, ln, *_ in e.step_plan("decode", batch, batch, batch).launches]
            assert ("attn_prep" in fams) == (not fused) and "attn_decode" in fams, fams
            out[fused] = _teacher_forced_then_greedy(e, prompts, goldens_long["greedy_ids"][:16])
    finally:
        fam.stage_kv, fam.fuse_prep = default
    print(f"fused vs prep launch: max |d logit| {np.max(np.abs(out[True][0] - out[False][0]))}")
    ENGINE_REORDER.check(out[True][0], out[False][0], "decode with attn_prep folded vs launched: decode logits")
    assert out[True][1] == out[False][1]


@pytest.mark.parametrize("greedy", [True, False], ids=["argmax", "sample"])
def test_non_finite_logits_give_no_token_on_the_cuda_path(artifacts, goldens, greedy):
    """``ninferc run``'s CUDA path (Session.sample / decode_stream, the sampler inside the replayed graph): logits
    made non-finite (the final norm's weight NaN from the 4th step on) end the generation with NonFiniteLogits
    instead of an id -- the sampler's -1 for a row whose maximum is not finite."""
    from ninferc.errors import NinfercError
    from ninferc.generate import generate
    from ninferc.sampling import NonFiniteLogits, SamplingParams

    from ninferc.artifact import Artifact
    from ninferc.runtime.engine import Engine

    e = Engine(Artifact.open(artifacts["sm_90"]), plan="replay")
    params = SamplingParams() if greedy else SamplingParams(temperature=0.8, seed=3)
    from ninferc.testing import nan_final_norm_after

    on_token, seen = nan_final_norm_after(e, 3)

    with pytest.raises(NonFiniteLogits, match="non-finite logits"):
        generate(e.session(), goldens["cases"][0]["prompt_ids"], max_new=20, params=params, on_token=on_token)
    assert 3 <= len(seen) <= 5 and all(t >= 0 for t in seen)
    assert issubclass(NonFiniteLogits, NinfercError)


@pytest.mark.parametrize("k", [0, 3])
def test_penalties_bias_min_p_and_min_tokens_apply_on_the_gpu(artifacts, goldens, k):
    """The serving backend's device-side sampling adjustments on the GPU (:func:`ninferc.testing.
    check_device_adjusted_rows`, as on the emulated device): the adjusted rows bit-exact against the host sampler's
    rules (CuPy's fp32 arithmetic is IEEE as numpy's; each operation its own kernel, so nothing is contracted into an
    FMA), min_p's set the host's, every row drawn on the device with decode ahead -- or with K = 3 drafts, every
    verify row adjusted with the drafts before it and every round accepted from the drawn ids -- and the plain
    request beside them its golden up to its first near-tie."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.testing import check_device_adjusted_rows

    cases = goldens["cases"]
    c = cases[1]
    n = min(8, greedy_prefix_len(c["top1_margin"]))
    be = CudaBatchBackend(artifacts["sm_90"], max_context=512, num_slots=3, num_pages=24, prefill_chunk=64,
                          spec_tokens=k)
    try:
        stats = check_device_adjusted_rows(be, [cases[0]["prompt_ids"], cases[2]["prompt_ids"], c["prompt_ids"]],
                                           c["greedy_ids"], steps=n, chunk=64, spec_tokens=k)
    finally:
        be.close()
    assert stats["adjusted_rows"] >= 2 * n if not k else stats["one_read_rounds"] >= 1


def test_a_mixed_speculative_round_on_the_gpu(artifacts, goldens):
    """``--spec mtp`` (K = 3) on the GPU with a seeded sampling request (accepted from ids drawn on the device) sharing
    its rounds with a greedy request asking for logprobs (accepted from its logits, ``verify_mixed``): the seeded text
    is the one it gets alone, the greedy one its golden up to its first near-tie, with logprobs
    (:func:`ninferc.testing.check_mixed_speculative_round`, as on the emulated device)."""
    from ninferc.runtime.cuda_backend import CudaBatchBackend
    from ninferc.testing import check_mixed_speculative_round

    c = goldens["cases"][1]
    check_mixed_speculative_round(
        lambda: CudaBatchBackend(artifacts["sm_90"], max_context=512, num_slots=2, num_pages=16, prefill_chunk=64,
                                 spec_tokens=3),
        goldens["cases"][0]["prompt_ids"], c["prompt_ids"], c["greedy_ids"], a_tokens=24,
        b_tokens=min(12, greedy_prefix_len(c["top1_margin"])), k=3, chunk=64)
