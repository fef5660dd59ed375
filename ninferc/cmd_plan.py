"""``ninferc plan``: show the launch plan of a model for one target, and why each grid is what it is.

Until the IR lowering exists, the kernel instances come from
:func:`ninferc.targets.kernels.representative_instances` (the projection GEMVs of the model's shapes,
from a preset or a checkpoint's ``config.json``); the command itself only consumes a list of
(name, family, problem), so the lowering can replace that source without touching the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ninferc.errors import ConfigError, PlanError


def _load_config(model_dir: str) -> dict:
    path = Path(model_dir) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{model_dir}: no config.json (expected a Hugging Face checkpoint directory)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


@click.command("plan")
@click.argument("model_dir", required=False, type=click.Path(file_okay=False))
@click.option("--target", "target", required=True, help="Target arch: sm_86, sm_89, sm_90 or sm_120a.")
@click.option("--sku", default=None, help="GPU product (e.g. l20, rtx4090, h200); sets the SM count.")
@click.option("--sms", type=int, default=None, help="SM count, when planning without a SKU.")
@click.option("--preset", default=None, help="Model-shape preset instead of MODEL_DIR (e.g. qwen3.8-27b).")
@click.option("--tokens", "tokens", type=int, multiple=True,
              help="Token count T to plan (repeatable). Default: 1 4 16 128 1024.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON instead of a table.")
def plan_cmd(model_dir, target, sku, sms, preset, tokens, as_json):
    """Print the launch plan (block, registers, shared memory, CTAs/SM, limiter, grid per T, cooperative
    cap, waves, route) for MODEL_DIR or --preset on --target with --sku or --sms."""
    from ninferc.targets.arch import get_arch
    from ninferc.targets.kernels import PRESETS, representative_instances
    from ninferc.targets.plan import DEFAULT_TOKENS, make_plan
    from ninferc.targets.skus import skus_for_arch

    arch = get_arch(target)
    if sku is None and sms is None:
        raise PlanError(
            f"ninferc plan --target {arch.name}: give --sku NAME or --sms N (SKUs for {arch.name}: "
            + ", ".join(s.key for s in skus_for_arch(arch.name)) + ")"
        )
    if (model_dir is None) == (preset is None):
        raise ConfigError(
            "ninferc plan: give exactly one of MODEL_DIR or --preset (presets: " + ", ".join(PRESETS) + ")"
        )
    source = preset if preset is not None else _load_config(model_dir)
    instances = representative_instances(source)
    plan = make_plan(instances, arch, sms=sms, sku=sku, tokens=tokens or DEFAULT_TOKENS)
    if as_json:
        click.echo(plan.dumps(), nl=False)
    else:
        click.echo(plan.table(), nl=False)
