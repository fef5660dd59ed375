"""Arch and SKU data: lookups, errors, and the SM counts the project ships with (DESIGN.md section 4)."""

import pytest

from ninferc.errors import TargetError
from ninferc.targets.arch import (ARCHS, arch_for_compute_capability, get_arch, plan_runs_on,
                                  require_plan_runs_on)
from ninferc.targets.skus import SKUS, get_sku, skus_for_arch

# The SKU list and SM counts the brief requires, checked against the table.
EXPECTED_SMS = {
    ("sm_86", "rtx3090"): 82, ("sm_86", "rtx3090ti"): 84, ("sm_86", "a10"): 72,
    ("sm_89", "rtx4090"): 128, ("sm_89", "l20"): 92, ("sm_89", "l40s"): 142,
    ("sm_89", "rtx4080super"): 80, ("sm_89", "l4"): 58,
    ("sm_90", "h100sxm"): 132, ("sm_90", "h100pcie"): 114, ("sm_90", "h200"): 132, ("sm_90", "h20"): 78,
    ("sm_120a", "rtx5090"): 170, ("sm_120a", "rtx5080"): 84, ("sm_120a", "rtx5070ti"): 70,
    ("sm_120a", "rtx5060ti"): 36, ("sm_120a", "rtx5090laptop"): 82, ("sm_120a", "rtxpro6000"): 188,
}


def test_get_arch_names_and_errors():
    assert get_arch("sm_89").cc == (8, 9)
    assert get_arch("SM89") is get_arch("89") is get_arch("8.9") is get_arch("sm_89")
    assert get_arch("sm_120").name == "sm_120a"
    assert get_arch("sm_90a").name == "sm_90"  # Hopper's arch-specific kernels are built under the sm_90 target
    with pytest.raises(TargetError) as e:
        get_arch("sm_75")
    msg = str(e.value)
    assert "'sm_75'" in msg and all(a in msg for a in ARCHS)


def test_h200_numbers_match_the_driver_readout():
    a = get_arch("sm_90")
    assert (a.max_threads_per_sm, a.regs_per_sm, a.max_ctas_per_sm) == (2048, 65536, 32)
    assert (a.smem_per_sm, a.max_smem_per_cta_optin) == (233472, 232448)
    assert a.cooperative_launch and a.cubin_folds_reserved_smem


def test_arch_invariants():
    for a in ARCHS.values():
        assert a.max_warps_per_sm * a.warp_size == a.max_threads_per_sm
        assert a.reg_granularity_per_thread == 8
        assert a.max_smem_per_cta_optin + a.reserved_smem_per_cta == a.smem_per_sm
        assert a.smem_carveouts[-1] == a.smem_per_sm
        assert a.max_grid_dims == (2**31 - 1, 65535, 65535)


def test_arch_for_compute_capability():
    assert arch_for_compute_capability((9, 0)).name == "sm_90"
    assert arch_for_compute_capability((8, 9)).name == "sm_89"
    assert arch_for_compute_capability((8, 6)).name == "sm_86"
    assert arch_for_compute_capability((12, 0)).name == "sm_120a"
    with pytest.raises(TargetError, match=r"7\.5"):
        arch_for_compute_capability((7, 5))


def test_plan_runs_on_any_described_device():
    """Sources are recompiled for the device, so any plan runs on any device with a target description
    (sm_120a's plan replays on the H200); a device without one (cc 7.5, 8.0) is refused by name."""
    assert plan_runs_on("sm_89", (9, 0)) and plan_runs_on("sm_86", (12, 0)) and plan_runs_on("sm_90", (9, 0))
    assert plan_runs_on("sm_120a", (9, 0)) and plan_runs_on("sm_90", (8, 9))
    assert not plan_runs_on("sm_89", (7, 5)) and not plan_runs_on("sm_89", (8, 0))
    with pytest.raises(TargetError, match=r"sm_120a cannot run on a device of cc 7\.5"):
        require_plan_runs_on("sm_120a", (7, 5))


def test_sku_table_has_required_entries():
    assert {(s.arch, s.key): s.sms for s in SKUS} == EXPECTED_SMS
    for s in SKUS:
        assert s.arch in ARCHS and s.source and s.bandwidth_gbs > 0 and s.memory_gib > 0 and s.l2_mib > 0


@pytest.mark.parametrize("name", ["L20", "l20", "rtx4090", "RTX 4090", "rtx-4090", "GeForce RTX 4090", "h200",
                                  "RTX 5090 Laptop", "rtx_pro_6000", "NVIDIA L40S"])
def test_sku_lookup_is_case_space_dash_insensitive(name):
    assert get_sku(name).key.replace("_", "") in {"l20", "rtx4090", "h200", "rtx5090laptop", "rtxpro6000", "l40s"}


def test_unknown_sku_lists_known_skus_for_arch():
    with pytest.raises(TargetError) as e:
        get_sku("rtx9999", "sm_89")
    msg = str(e.value)
    assert "rtx9999" in msg and all(s.key in msg for s in skus_for_arch("sm_89"))
    assert "h200" not in msg


def test_sku_of_other_arch_is_an_error():
    with pytest.raises(TargetError) as e:
        get_sku("h200", "sm_89")
    assert "sm_90" in str(e.value) and "sm_89" in str(e.value)
