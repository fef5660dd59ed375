"""The kernel-compile progress bar: advanced once per distinct kernel, its postfix counting disk-cache hits."""

from __future__ import annotations

from ninferc.ir.config import ModelConfig
from ninferc.targets.model_plan import plan_for_config
from ninferc.testing import models_dir


class Bar:
    def __init__(self, total):
        self.total, self.n, self.postfix, self.closed = total, 0, "", False

    def update(self, n):
        self.n += n

    def set_postfix_str(self, s, refresh=True):
        self.postfix = s

    def close(self):
        self.closed = True


def test_progress_counts_every_kernel_and_the_cache_hits():
    cfg = ModelConfig.from_dir(models_dir() / "qwen35-tiny-code")
    bars = []

    def factory(total):
        bars.append(Bar(total))
        return bars[-1]

    plan_for_config(cfg, "sm_89", sku="l20", progress=factory)  # warm: every kernel is in the cache now
    plan_for_config(cfg, "sm_89", sku="l20", progress=factory)
    b = bars[-1]
    assert b.closed and b.n == b.total > 20
    assert b.postfix == f"{b.total} cached"
