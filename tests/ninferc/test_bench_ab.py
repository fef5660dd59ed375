"""bench/ab.py's alternation (CPU, fake sessions): rounds x variants in turn, warm-up steps left untimed
exactly where a graph is (re)captured, tokens threaded through each variant's own chain."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ab  # noqa: E402


class FakeSession:
    def __init__(self, log):
        self.log, self.last = log, None

    def decode(self, tok):
        self.log.append(tok)

    def sample(self, params):
        return self.log[-1] + 1


def test_alternate_orders_rounds_and_skips_warmup_steps():
    calls, switched = [], []
    s = FakeSession(calls)
    variants = {"a": (lambda: switched.append("a"), s), "b": (lambda: switched.append("b"), s)}
    toks = {"a": 0, "b": 1000}
    res = ab.alternate(variants, toks, rounds=2, steps=5, recapture=True, log=lambda m: None)
    assert switched == ["a", "b", "a", "b"]
    assert set(res) == {"a", "b"} and all(len(v) == 2 for v in res.values())
    # recapture: every round decodes WARMUP_STEPS extra steps; each variant's tokens follow its own chain
    assert len(calls) == 2 * 2 * (5 + ab.WARMUP_STEPS)
    assert toks == {"a": 2 * (5 + ab.WARMUP_STEPS), "b": 1000 + 2 * (5 + ab.WARMUP_STEPS)}
    calls.clear()
    ab.alternate(variants, {"a": 0, "b": 0}, rounds=3, steps=4, recapture=False, log=lambda m: None)
    assert len(calls) == 2 * (3 * 4 + ab.WARMUP_STEPS)  # only round 0 warms up
    assert ab.medians({"a": [3.0, 1.0, 2.0]}) == {"a": 2.0}


def test_family_ab_variants_parse_and_reject_unknown_attributes():
    import pytest

    import family_ab

    name, sets = family_ab.parse_variant("rw2:gemv.quant_rows_per_warp=2;sample.split_argmax=False")
    assert name == "rw2" and sets == {("gemv", "quant_rows_per_warp"): 2, ("sample", "split_argmax"): False}
    assert family_ab.parse_variant("now") == ("now", {})
    with pytest.raises(SystemExit, match="not an attribute"):
        family_ab.parse_variant("x:gemv.no_such_knob=1")
    with pytest.raises(SystemExit, match="not an attribute"):
        family_ab.parse_variant("x:nofamily.a=1")
    with pytest.raises(SystemExit, match="family.attr=value"):
        family_ab.parse_variant("x:gemv=1")


def test_family_ab_repeats_the_first_variant_last_and_refuses_duplicate_names():
    """``--repeat-first`` appends the first variant's settings under ``<first>_again`` (built and timed last, to show
    the harness's own spread); two variants of one name are refused (they would share a result row)."""
    import family_ab
    import pytest

    parsed = family_ab.with_repeat(["now", "rw2:gemv.quant_rows_per_warp=2"], True)
    assert [n for n, _ in parsed] == ["now", "rw2", "now_again"] and parsed[-1][1] == parsed[0][1] == {}
    parsed = family_ab.with_repeat(["x:sample.split_argmax=False", "now"], True)
    assert parsed[-1] == ("x_again", {("sample", "split_argmax"): False})
    assert [n for n, _ in family_ab.with_repeat(["now", "b"], False)] == ["now", "b"]
    with pytest.raises(SystemExit, match="variant names must differ"):
        family_ab.with_repeat(["now", "now"], False)
    with pytest.raises(SystemExit, match="variant names must differ"):
        family_ab.with_repeat(["now", "now_again"], True)


def test_pdl_boundary_probe_source_compiles_for_sm90():
    """bench/pdl_boundary_probe.py's kernels (GPU-only probe) compile with NVRTC and are PDL-aware."""
    import pdl_boundary_probe as probe

    from ninferc.targets.cubin import read_resources
    from ninferc.targets.nvrtc import DEFAULT_OPTIONS, compile_cubin

    src = probe.probe_source()
    assert "NINFER_PDL_ENTRY();" in src  # DeviceKernel.pdl_capable
    c = compile_cubin(src, "sm_90", name="pdl_boundary_probe", options=DEFAULT_OPTIONS)
    res = read_resources(c.cubin, "sm_90", c.ptx)
    assert set(res) == {"chain_pdl", "chain_flag"} and all(r.local_bytes == 0 for r in res.values())
