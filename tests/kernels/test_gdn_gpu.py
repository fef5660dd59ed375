"""GDN kernels on the GPU vs the numpy reference (tiny fixture and 27B shapes), marked ``gpu``.

Each test runs with fresh random inputs, NaN-filled free slots / ring rows and NaN-poisoned outputs (see
tests/kernels/gdn_cases.py). Plans: the device's own arch, and an sm_86 plan (99 KiB shared memory, so the 27B
chunk kernel splits dv into two 64-column CTAs and adds gdn_gated_norm) executed on this device -- the
per-arch golden rule of DESIGN.md section 7. Failures name the worst element (index, kernel, reference).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gdn_cases as cases  # noqa: E402
from ninferc.targets.kernels import gdn  # noqa: E402

pytestmark = pytest.mark.gpu

PROBLEMS = {"tiny": gdn.TINY, "27b": gdn.QWEN38_27B}


@pytest.fixture(scope="module")
def backend():
    return cases.CupyBackend()


@pytest.fixture(scope="module", params=["device", "sm_86"])
def ctx(request):
    """Plan context for the device's arch (and SM count), or an sm_86 plan run on this device."""
    from ninferc.runtime.kernels import device_arch, device_sm_count

    arch = device_arch() if request.param == "device" else "sm_86"
    sms = device_sm_count() if request.param == "device" else 82
    return cases.make_ctx(list(PROBLEMS.values()), arch, sms)


@pytest.mark.parametrize("variant", list(cases.DECODE_VARIANTS))
@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("starts", [[0], [5], [0, 5, 130]], ids=["B1pos0", "B1pos5", "B3"])
def test_decode(backend, ctx, name, starts, variant):
    cases.scenario_decode(backend, ctx, PROBLEMS[name], starts, seed=len(starts), variant=variant)
    if len(starts) > 1:  # one CTA row looping over the sequences (a preload variant preloads only the first)
        cases.scenario_decode(backend, ctx, PROBLEMS[name], starts, seed=7, variant=variant, grid_y=1)


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("length", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("start", [0, 37])
def test_prefill_chunked_one_sequence(backend, ctx, name, length, start):
    cases.scenario_prefill(backend, ctx, PROBLEMS[name], [start], [length], seed=length + start)


@pytest.mark.parametrize("name", PROBLEMS)
def test_prefill_chunked_three_sequences(backend, ctx, name):
    """B = 3 packed: a fresh sequence over garbage (65 tokens), a 1-token step at 17, 200 tokens at 300."""
    cases.scenario_prefill(backend, ctx, PROBLEMS[name], [0, 17, 300], [65, 1, 200], seed=11)


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("lengths", [[63], [200], [65, 1, 64]], ids=["63", "200", "B3"])
def test_prefill_recurrent(backend, ctx, name, lengths):
    starts = [0, 3, 129][: len(lengths)]
    cases.scenario_prefill(backend, ctx, PROBLEMS[name], starts, lengths, route="recurrent", seed=len(lengths))


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("lengths", [[1], [64], [200], [65, 1, 130]], ids=["1", "64", "200", "B3"])
def test_chunked_equals_recurrent(backend, ctx, name, lengths):
    starts = [0, 9, 70][: len(lengths)]
    cases.scenario_routes_agree(backend, ctx, PROBLEMS[name], starts, lengths, seed=sum(lengths))


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("route", gdn.ROUTES)
def test_decode_after_prefill_chain(backend, ctx, name, route):
    """prefill (200 and 5 tokens from position 0) -> decode -> decode -> prefill (3, 1) -> decode; y and the
    state equal the reference chain after every step."""
    cases.scenario_chain(backend, ctx, PROBLEMS[name], route=route, first=(200, 5), seed=5)


@pytest.mark.parametrize("name", PROBLEMS)
def test_driver_occupancy_matches_plan(backend, name):
    """For every GDN launch of the device plan, the driver's resident CTAs/SM equal the calculator's."""
    from ninferc.runtime.kernels import DeviceKernel, device_arch, device_sm_count

    p = PROBLEMS[name]
    c = cases.make_ctx([p], device_arch(), device_sm_count())
    lns = gdn.layer_launches(p, 1, c, decode=True) + gdn.layer_launches(p, 200, c, decode=False, batch=2)
    lns += gdn.layer_launches(p, 200, c, decode=False, batch=2, route="recurrent")
    lns += gdn.layer_launches(p, 200, c, decode=False, batch=2, route="chunked")
    for _, ln in lns:
        k = DeviceKernel.from_spec(ln.kernel)
        got = k.driver_occupancy(ln.threads, ln.dynamic_smem_bytes)
        assert got == ln.ctas_per_sm, (f"{ln.kernel.uri}: driver {got} CTAs/SM, plan {ln.ctas_per_sm} "
                                       f"(limiter {ln.limiter}, dynamic smem {ln.dynamic_smem_bytes} B)")
        attrs = k.attributes()
        assert attrs.local_bytes == 0, f"{ln.kernel.uri}: {attrs.local_bytes} B local memory on the device"


@pytest.mark.parametrize("name", PROBLEMS)
def test_five_sequences_short_histories(backend, ctx, name):
    """B = 5 over 11 NaN-filled slots, positions 0..3 (conv taps reaching before position 0) and 250; only
    the batch's slots and ring rows may change (compare_step checks the others bit for bit)."""
    cases.scenario_prefill(backend, ctx, PROBLEMS[name], [0, 1, 2, 3, 250], [3, 70, 1, 2, 5], seed=3)
    cases.scenario_decode(backend, ctx, PROBLEMS[name], [0, 1, 2, 3, 250], seed=4)


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("route", ["wy", "chunked"])
@pytest.mark.parametrize("dv_block", gdn.DV_BLOCKS)
def test_prefill_every_dv_block(backend, name, dv_block, route):
    """Each column block the chunk kernel supports, forced, on the device's own plan, for both chunked routes
    (the plan picks one by gdn.scan_cost / chunk_cost; the others must stay correct: a smaller SM count or a
    batch picks them). Blocks that do not divide dv or do not fit the device's shared memory are skipped."""
    from ninferc.runtime.kernels import device_arch, device_sm_count

    p = PROBLEMS[name]
    if dv_block not in gdn.dv_blocks(p):
        pytest.skip(f"dv_block {dv_block} does not divide dv {p.dv}")
    c = cases.make_ctx([p], device_arch(), device_sm_count(), dv_block=dv_block)
    fam = gdn.GdnChunkFamily(route=route, dv_block=dv_block)
    spec = fam.chunk_spec(p, dv_block, wy=route == "wy")
    need = c.resources_of(spec).static_smem_bytes + gdn.chunk_smem_bytes(p, dv_block, fam.chunk, wy=route == "wy")
    if need > c.arch.max_smem_per_cta_optin:  # the one documented reason a forced block is not run
        pytest.skip(f"dv_block {dv_block}: {need} B of shared memory > the opt-in maximum "
                    f"{c.arch.max_smem_per_cta_optin} B of {c.arch.name}")
    fam.launch(p, 130, c)  # any other PlanError is a plan regression: it fails the test
    cases.scenario_prefill(backend, c, p, [0, 40], [130, 3], route=route, dv_block=dv_block, seed=dv_block)


@pytest.mark.parametrize("variant", ["planned", *cases.VERIFY_VARIANTS])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_verify_keeps_the_state_after_every_token(backend, ctx, name, variant):
    """The speculative verify step on the device: K + 1 = 4 tokens of three sequences (one of 1 token), and of one
    sequence, the state and conv window after each token in its own slot, the input slot among the outputs or left
    alone -- the planned core (on a 132-SM device the 27B's columns split in 2 CTAs per head at 3 sequences, in 4 at
    one), one CTA per head and two."""
    cases.scenario_verify(backend, ctx, PROBLEMS[name], [7, 300, 2], [4, 1, 4], current=[1, 0, 4], seed=13,
                          variant=variant)
    cases.scenario_verify(backend, ctx, PROBLEMS[name], [40], [4], current=[4], seed=14, variant=variant)
