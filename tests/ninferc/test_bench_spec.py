"""``ninferc bench --spec mtp``, the CPU-checkable half: the forced acceptance schedule, the flags refused with the
value before any GPU work, and the synthetic 27B artifact carrying an MTP head planned for the target (the GPU half,
the timed rounds: tests/server/test_spec_cuda_gpu.py ``test_spec_rounds_at_a_forced_acceptance``)."""

import numpy as np
import pytest
from click.testing import CliRunner

from ninferc.bench import accepted_schedule
from ninferc.cli import main
from ninferc.errors import NinfercError


@pytest.mark.parametrize("rate,k", [(0.76, 3), (0.5, 1), (1.0, 5), (0.0, 2), (0.33, 4)])
def test_accepted_schedule_has_the_asked_mean(rate, k):
    s = accepted_schedule(rate, k, 4000, np.random.default_rng(1))
    assert all(int(np.floor(rate * k)) <= m <= min(k, int(np.floor(rate * k)) + 1) for m in s)
    assert abs(np.mean(s) / k - rate) < 0.02


def test_accepted_schedule_refuses_a_rate_outside_0_1():
    with pytest.raises(NinfercError, match=r"--accept-rate must be in \[0, 1\] \(found 1.5\)"):
        accepted_schedule(1.5, 3, 1, np.random.default_rng(0))


@pytest.mark.parametrize("args,needle", [
    (["--draft-tokens", "2"], "--draft-tokens applies with --spec mtp"),
    (["--accept-rate", "0.5"], "--accept-rate applies with --spec mtp"),
    (["--spec", "mtp", "--accept-rate", "1.5"], "--accept-rate must be in [0, 1] (found 1.5)"),
])
def test_spec_flags_refused_before_the_gpu(args, needle):
    r = CliRunner().invoke(main, ["bench", "--preset", "qwen3.8-27b", "--synthetic-weights", *args])
    assert r.exit_code == 2 and needle in r.output, r.output


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
def test_synthetic_27b_artifact_carries_an_mtp_head():
    """The 27B preset declares no head; ``--spec`` gives its synthetic artifact one layer (as the Qwen3.5 / 3.6
    checkpoints carry), through the model's passes, with its kernels and weights in the artifact."""
    from ninferc.bench import synthetic_artifact
    from ninferc.targets.arch import get_arch
    from ninferc.targets.target import make_target

    art = synthetic_artifact("qwen3.8-27b", "w4", "bf16", target=make_target(get_arch("sm_90"), "h200"),
                             max_context=1024, mtp=True)
    mg = art.mtp_graph()
    assert mg is not None and mg.meta.get("mtp") and art.config.mtp_num_hidden_layers == 1
    names = {t["name"] for t in art.header["tensors"]}
    assert {"mtp.fc", "mtp.L0.attn.q_k_v", "mtp.L0.mlp.gate_up", "mtp.norm"} <= names
    assert mg.params["mtp.fc"].dtype == "w4"
    uris = {k["uri"] for k in art.header["kernels"]}
    assert any("x_bf16" in u for u in uris) and any("ld_out" in u for u in uris)
    plain = synthetic_artifact("qwen3.8-27b", "w4", "bf16", target=make_target(get_arch("sm_90"), "h200"),
                               max_context=1024)
    assert plain.mtp_graph() is None and not any(t["name"].startswith("mtp.") for t in plain.header["tensors"])
