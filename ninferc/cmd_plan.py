"""``ninferc plan``: show the launch plan of a model for one target, and why each grid is what it is.

The model (a checkpoint's ``config.json`` or a preset) is built, run through the compile pipeline and
lowered (:mod:`ninferc.targets.lower`); :func:`ninferc.targets.model_plan.plan_model` evaluates every
step's launch for decode batches B and prefill token counts T (and, with ``--draft-tokens K``, the speculative
verify step of B x (K + 1) tokens) with the compiled kernels' resources.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ninferc.errors import ConfigError, PlanError
from ninferc.targets.arch import SUPPORTED


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
@click.option("--target", "target", required=True, help=f"Target arch: {SUPPORTED}.")
@click.option("--sku", default=None, help="GPU product (e.g. l20, rtx4090, h200); sets the SM count.")
@click.option("--sms", type=click.IntRange(min=1), default=None, help="SM count, when planning without a SKU.")
@click.option("--preset", default=None, help="Model-shape preset instead of MODEL_DIR (e.g. qwen3.8-27b).")
@click.option("--tokens", "tokens", type=click.IntRange(min=1), multiple=True,
              help="Prefill token count T to plan (repeatable; at most --max-context). Default: those of 1 64 1024 "
                   "8192 within --max-context.")
@click.option("--batch", "batches", type=click.IntRange(min=1), multiple=True,
              help="Decode batch B (sequences, one token each) to plan (repeatable). Default: 1 4 8 16.")
@click.option("--max-context", default=4096, type=click.IntRange(min=2), show_default=True, help="KV capacity per sequence (tokens).")
@click.option("--page-size", default=64, type=int, show_default=True, help="KV page size (tokens; a positive multiple of 32).")
@click.option("--weights", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="Weight format the plan's GEMV/GEMM kernels read (as ninferc compile --weights).")
@click.option("--recipe", default=None, help="Per-class overrides of --weights (as ninferc compile --recipe).")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default="bf16", show_default=True,
              help="KV cache dtype (as ninferc compile --kv-dtype).")
@click.option("--draft-tokens", type=click.IntRange(1, 5), default=None,
              help="Also plan the speculative verify step of each decode batch B: B sequences of K + 1 tokens (the "
                   "step of ninferc serve --spec mtp --draft-tokens K; columns V=B(K+1)).")
@click.option("--explain", "explain", default=None, metavar="STEPS",
              help="Also show why the GEMV launches of the steps matching STEPS (a glob over the step names, e.g. "
                   "'L0.mlp.*' or '*gate_up') are the variants they are: every variant compared, best first, with the "
                   "cost model's estimate (with --json: an \"explain\" list).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON instead of a table.")
def plan_cmd(model_dir, target, sku, sms, preset, tokens, batches, max_context, page_size, weights, recipe, kv_dtype,
             draft_tokens, explain, as_json):
    """Print the launch plan (block, registers, shared memory, CTAs/SM, limiter, grid per B/T, cooperative
    cap, waves, route) of every kernel of MODEL_DIR or --preset on --target with --sku or --sms (with
    --draft-tokens, of the speculative verify steps too)."""
    from ninferc.ir.config import PRESETS, ModelConfig, preset as get_preset
    from ninferc.targets.model_plan import DECODE_BATCHES, PREFILL_TOKENS, plan_for_config
    from ninferc.targets.target import make_target

    tgt = make_target(target, sku, sms, command="ninferc plan")  # --target / --sku / --sms parsed once
    if (model_dir is None) == (preset is None):
        raise ConfigError(
            "ninferc plan: give exactly one of MODEL_DIR or --preset (presets: " + ", ".join(PRESETS) + ")"
        )
    cfg = get_preset(preset) if preset is not None else ModelConfig.from_dir(model_dir)
    cfg.check_context(max_context)
    too_long = sorted(t for t in tokens if t > max_context)
    if too_long:
        raise PlanError(f"ninferc plan: --tokens {too_long[-1]} is more than --max-context {max_context}: a prefill "
                        "chunk holds at most the context's tokens (raise --max-context, up to the model's "
                        f"{cfg.max_position_embeddings:,})")
    tokens = tokens or tuple(t for t in PREFILL_TOKENS if t <= max_context) or (max_context,)
    from ninferc.ir.quant import recipe_name

    plan = plan_for_config(cfg, tgt, weights=recipe_name(weights, recipe), kv_dtype=kv_dtype,
                           max_context=max_context, page_size=page_size,
                           decode_batches=batches or DECODE_BATCHES, prefill_tokens=tokens,
                           draft_tokens=draft_tokens or 0, progress=_kernel_bar)
    if explain is not None:
        import fnmatch

        names = [s.name for s in plan.program.steps]
        if not any(fnmatch.fnmatchcase(n, explain) for n in names):  # a typo, not a step without GEMVs
            raise PlanError(f"ninferc plan: --explain {explain!r} matches none of the plan's {len(names)} steps (a "
                            "case-sensitive glob over the table's step names, e.g. " +
                            ", ".join(repr(n) for n in names[:3]) + ", 'L0.mlp.*' or '*gate_up')")
    if as_json:
        if explain is not None:
            from ninferc.targets.model_plan import _dump_json

            click.echo(_dump_json({**plan.to_json(), "explain": plan.explain(explain)}, 0))
        else:
            click.echo(plan.dumps(), nl=False)
    else:
        click.echo(plan.table(), nl=False)
        if explain is not None:
            click.echo("")
            click.echo(plan.explain_text(explain), nl=False)


def _kernel_bar(total: int):
    """A progress bar on stderr over the kernels to compile (the first plan of a target compiles for 10-45 s)."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc="kernels", unit="kernel", file=sys.stderr, disable=None)  # None: on a terminal only
