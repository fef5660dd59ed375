"""The target parsed once: :func:`make_target` builds one frozen :class:`Target` from ``--target`` / ``--sku`` /
``--sms``, the commands pass it down, and every error names the value and the limit."""

import dataclasses

import pytest
from click.testing import CliRunner

from ninferc.cli import main
from ninferc.errors import PlanError, TargetError
from ninferc.targets import target as target_mod
from ninferc.targets.arch import ARCHS, SUPPORTED
from ninferc.targets.plan import PlanContext
from ninferc.targets.skus import get_sku, skus_for_arch, typical_sku
from ninferc.targets.target import Target, as_target, make_target
from ninferc.testing import models_dir


def test_a_sku_gives_the_sm_count_and_the_bandwidth():
    t = make_target("89", "L20")
    assert t.arch is ARCHS["sm_89"] and t.sku is get_sku("l20") and t.name == "sm_89"
    assert (t.sms, t.sms_source, t.bandwidth_gbs, t.bandwidth_source) == (92, "sku", 864, "SKU datasheet")
    assert t.bandwidth_per_sm_gbs == 864 / 92 and t.bandwidth_note() == "DRAM 864 GB/s (SKU datasheet)"
    assert make_target("sm_89", "l20", 92) == t  # --sms agreeing with the SKU
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.sms = 1


def test_a_bare_sm_count_assumes_the_arch_typical_bandwidth_per_sm():
    t = make_target("sm_120", sms=40)
    assert (t.name, t.sku, t.sms, t.sms_source, t.bandwidth_gbs) == ("sm_120a", None, 40, "sms", None)
    s = typical_sku("sm_120a")
    assert t.bandwidth_per_sm_gbs == s.bandwidth_gbs / s.sms and t.bandwidth_source == "typical"
    assert f"the {s.name}'s: the median of the sm_120a SKUs" in t.bandwidth_note()
    ctx = PlanContext.for_target(t, {})
    assert (ctx.arch, ctx.sms, ctx.bandwidth_gbs, ctx.bandwidth_per_sm_gbs) == (t.arch, 40, None, t.bandwidth_per_sm_gbs)
    assert make_target("sm_90", sms=132, sms_source="device").sms_source == "device"


@pytest.mark.parametrize("args, kw, err, needles", [
    (("sm_75",), {"sms": 40}, TargetError, ["'sm_75'", SUPPORTED]),
    (("sm_89", "rtx9999"), {}, TargetError, ["'rtx9999'", "known SKUs for sm_89", "l20"]),
    (("sm_89", "h200"), {}, TargetError, ["SKU 'h200' (NVIDIA H200 SXM) is sm_90, not the requested target sm_89"]),
    (("sm_89", get_sku("h200")), {}, TargetError, ["is sm_90, not the requested target sm_89"]),
    (("sm_89",), {}, PlanError, ["plan for sm_89: give a SKU or an SM count"]),
    (("sm_89",), {"command": "ninferc plan"}, PlanError,
     ["ninferc plan --target sm_89: give --sku NAME or --sms N (SKUs for sm_89: "
      + ", ".join(s.key for s in skus_for_arch("sm_89")) + ")"]),
    (("sm_89", "l20", 100), {}, PlanError, ["--sms 100 contradicts SKU NVIDIA L20 (92 SMs)"]),
    (("sm_89", None, 0), {}, PlanError, ["SM count must be positive, got 0"]),
    # a typo of an SM count (1320 for 132) is refused against the arch's largest die, named with its count
    (("sm_89", None, 100000), {}, PlanError, ["SM count 100000 is more than sm_89's largest die has (AD102: 144 SMs"]),
    (("sm_90", None, 1320), {}, PlanError, ["SM count 1320 is more than sm_90's largest die has (GH100: 144 SMs"]),
    (("sm_86", None, 85), {}, PlanError, ["(GA102: 84 SMs"]),
    (("sm_120a", None, 193), {}, PlanError, ["(GB202: 192 SMs"]),
    (("sm_89", None, 92), {"sms_source": "guess"}, PlanError, ["'guess'", "sku, sms, device"]),
])
def test_errors_name_the_value_and_the_limit(args, kw, err, needles):
    with pytest.raises(err) as e:
        make_target(*args, **kw)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_every_sku_and_the_largest_die_fit_the_arch_limit():
    """Every SKU's SM count is at most its arch's largest die (the limit cannot refuse a real product), and a plan
    for the full die itself is accepted."""
    from ninferc.targets.arch import ARCHS
    from ninferc.targets.skus import SKUS

    for s in SKUS:
        assert s.sms <= ARCHS[s.arch].max_sms, s
    for a in ARCHS.values():
        assert make_target(a.name, sms=a.max_sms).sms == a.max_sms


def test_as_target_converts_an_arch_name_and_keeps_a_target():
    t = make_target("sm_90", "h200")
    assert as_target(t) is t and as_target("sm_90", "h200") == t and isinstance(as_target("sm_86", sms=82), Target)
    with pytest.raises(PlanError, match="carries its SKU and SM count"):
        as_target(t, sms=132)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["plan", "compile"])
def test_the_command_line_parses_the_target_once(monkeypatch, tmp_path, command):
    """``ninferc plan`` / ``compile`` call make_target once, and the pipeline below them takes the Target as it is
    (as_target would call make_target again for a string)."""
    calls = []
    real = target_mod.make_target

    def counting(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(target_mod, "make_target", counting)
    tiny = str(models_dir() / "qwen35-tiny-code")
    args = ["--target", "sm_120a", "--sku", "rtx 5060 ti"]
    if command == "plan":
        r = CliRunner().invoke(main, ["plan", tiny, *args, "--json"])
    else:
        r = CliRunner().invoke(main, ["compile", tiny, *args, "-o", str(tmp_path / "t.ninfer")])
    assert r.exit_code == 0, r.output
    assert calls == [("sm_120a", "rtx 5060 ti", None)]
