"""`ninferc inspect MODEL_DIR | --preset NAME | FILE.ninfer`: what a model or an artifact holds."""

from __future__ import annotations

from pathlib import Path

import click

from ninferc.errors import NinfercError, path_problem


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


def describe_model(cfg) -> list[str]:
    """Lines describing a model config: layers by type, op counts, params, bytes, state."""
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.summary import param_summary, state_summary

    g = build_graph(cfg)
    ps, ss = param_summary(cfg), state_summary(cfg)
    lines = [
        f"model: {cfg.name or '?'} ({cfg.model_type})",
        f"layers: {cfg.num_hidden_layers} ({len(cfg.gdn_layers)} gated-deltanet, {len(cfg.attention_layers)} full attention)",
        f"  attention layers: {list(cfg.attention_layers)}",
        f"hidden {cfg.hidden_size}, mlp {cfg.intermediate_size}, vocab {cfg.vocab_size}, "
        f"tied embeddings {cfg.tie_word_embeddings}",
        f"attention: {cfg.num_attention_heads} q heads, {cfg.num_key_value_heads} kv heads, head_dim {cfg.head_dim}, "
        f"rotary {cfg.rotary_dim} dims, theta {cfg.rope_theta:g}",
        f"gated deltanet: {cfg.linear_num_key_heads} q/k heads x {cfg.linear_key_head_dim}, "
        f"{cfg.linear_num_value_heads} v heads x {cfg.linear_value_head_dim}, conv width {cfg.linear_conv_kernel_dim}",
        "ops: " + ", ".join(f"{k} {v}" for k, v in g.count_ops().items()),
        f"parameters: {ps['count']:,}",
    ]
    for dt, b in sorted(ps["bytes_by_dtype"].items()):
        lines.append(f"  {dt}: {b:,} bytes ({_fmt_bytes(b)})")
    for grp, n in sorted(ps["count_by_group"].items()):
        lines.append(f"  {grp}: {n:,} params")
    from ninferc.ir.passes import run_pipeline

    lines.append("stored weight bytes by --weights recipe (codes + scales; bytes by format):")
    for r in ("bf16", "w8", "w4"):
        by = run_pipeline(build_graph(cfg, lm_rows="last"), weights=r).bytes_by_format()
        lines.append(f"  {r}: {sum(by.values()):,} bytes ({_fmt_bytes(sum(by.values()))}) = "
                     + ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in by.items()))
    lines.append(f"state per sequence: KV {ss['kv_bytes_per_token']:,} bytes/token of context; "
                 f"GDN conv + recurrent {ss['fixed_bytes']:,} bytes ({_fmt_bytes(ss['fixed_bytes'])})")
    return lines


@click.command("inspect")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--preset", help="a built-in model shape instead of a checkpoint (e.g. qwen3.8-27b)")
@click.option("--verify", is_flag=True,
              help="also read every payload of an artifact and check its sha256 (reads the whole file); an "
                   "artifact carries kernel source that run / serve compile and launch: run only trusted ones")
def inspect_cmd(path, preset, verify):
    """Summarise a checkpoint dir, a preset, or a .ninfer artifact."""
    from ninferc.ir.config import preset as get_preset

    if (path is None) == (preset is None):
        from ninferc.ir.config import PRESETS

        raise NinfercError("give exactly one of MODEL_DIR / FILE.ninfer or --preset NAME (presets: "
                           + ", ".join(PRESETS) + ")")
    if verify and (preset or path_problem(path, "") is None and not path.is_file()):
        raise NinfercError("--verify checks a .ninfer artifact's payloads; give an artifact file")
    if preset:
        lines = describe_model(get_preset(preset))
    elif path.suffix == ".ninfer" and path_problem(path, "a .ninfer artifact"):
        raise NinfercError(path_problem(path, "a .ninfer artifact"))
    elif path_problem(path, "a checkpoint directory, a .ninfer artifact or --preset NAME"):
        raise NinfercError(path_problem(path, "a checkpoint directory, a .ninfer artifact or --preset NAME"))
    elif path.is_file():
        from ninferc.artifact import Artifact, describe_artifact

        lines = describe_artifact(path)
        if verify:
            art = Artifact.open(path)
            art.verify_all()
            lines.append(f"verified: {len(art.header['tensors'])} tensors and {len(art.header['blobs'])} blobs "
                         "match their sha256")

    else:
        from ninferc.checkpoint import Checkpoint

        ck = Checkpoint(path)
        lines = describe_model(ck.config)
    click.echo("\n".join(lines))
