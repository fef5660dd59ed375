"""`ninferc compile MODEL_DIR --target ARCH [--sku NAME | --sms N] -o FILE`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ninferc.targets.arch import SUPPORTED


@click.command("compile")
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("--target", required=True, help=f"the target arch: {SUPPORTED}")
@click.option("--sku", default=None, help="GPU product (e.g. l20, rtx4090, h200): sets the SM count the plan uses")
@click.option("--sms", type=click.IntRange(min=1), default=None, help="SM count, when planning without a SKU")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="the .ninfer file")
@click.option("--max-context", default=4096, type=click.IntRange(min=2), show_default=True, help="default KV capacity the plan is checked for")
@click.option("--page-size", default=64, type=int, show_default=True, help="KV page size in tokens (a positive multiple of 32)")
@click.option("--weights", "weights", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="weight format: w8 = int8 per output channel, w4 = int4 per group of 64 along K "
                   "(the recipe keeps the most sensitive tensors wider; see --recipe)")
@click.option("--recipe", default=None,
              help="per-class overrides of the --weights recipe, e.g. 'lm_head=bf16,embedding=w8' "
                   "(classes: embedding, lm_head, attention, gdn, mlp, mtp)")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default="bf16", show_default=True,
              help="KV cache dtype: int8 = one fp32 scale per 64 elements per token per head")
@click.option("--dump-ir", type=click.Path(path_type=Path), default=None, help="write the IR after each pass here")
def compile_cmd(model_dir, target, sku, sms, out, max_context, page_size, weights, recipe, kv_dtype, dump_ir):
    """Compile a Hugging Face checkpoint into a .ninfer artifact for one target."""
    from tqdm import tqdm

    from ninferc.errors import NinfercError
    from ninferc.pipeline import compile_model
    from ninferc.targets.target import make_target

    # --target / --sku / --sms parsed once, before any work: an unknown or contradicting SKU fails here
    tgt = make_target(target, sku, sms, command="ninferc compile")
    from ninferc.ir.quant import recipe_name as make_recipe_name

    recipe_name = make_recipe_name(weights, recipe)  # a malformed recipe fails before any work
    from ninferc.errors import output_problem

    why = output_problem(out, "-o") or _overwrites_input(out, model_dir)  # before the compile, not after it
    if why:
        raise NinfercError(why)
    if dump_ir is not None:  # made (with its parents) now, so a bad path fails before any work
        if dump_ir.exists() and not dump_ir.is_dir():
            raise NinfercError(f"--dump-ir {dump_ir}: exists and is not a directory")
        try:
            dump_ir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NinfercError(f"--dump-ir {dump_ir}: cannot create the directory ({exc.strerror or exc})") from None

    def log(msg):
        click.echo(msg, err=True)

    def progress(items):
        return tqdm(items, desc="weights", unit="tensor", file=sys.stderr)

    def kernel_progress(total):
        return tqdm(total=total, desc="kernels", unit="kernel", file=sys.stderr, disable=None)  # None: on a terminal

    compile_model(model_dir, tgt, out, max_context=max_context, page_size=page_size,
                  weights=recipe_name, kv_dtype=kv_dtype, dump_ir=dump_ir, log=log, progress=progress,
                  kernel_progress=kernel_progress)


def _overwrites_input(out: Path, model_dir: Path) -> str | None:
    """Why ``-o out`` would destroy the checkpoint being compiled (None when it would not): ``out`` is one of the
    files in ``model_dir`` -- as named, or the file a link there points to (a Hugging Face cache's snapshot links to
    its blobs) -- which compile's write-and-rename would replace (a new-user trial, 2026-12-07: ``-o
    ck/model-00001-of-00002.safetensors`` compiled, printed ``wrote``, and left the checkpoint unreadable)."""
    import os

    if not model_dir.is_dir():
        return None  # compile_model names the missing directory
    named, real = os.path.abspath(out), os.path.realpath(out)
    for f in model_dir.iterdir():
        if f.is_file() and (os.path.abspath(f) == named or os.path.realpath(f) in (named, real)):
            return (f"-o {out}: is the checkpoint's own file {f.name} (in {model_dir}); compiling would overwrite its "
                    "input -- write the artifact to a new file (e.g. model.ninfer)")
    return None
