"""`ninferc compile`: Hugging Face checkpoint -> `.ninfer` artifact for one target.

:func:`compile_model` is the pipeline as one list of named steps (DESIGN.md section 2): load, build,
passes, lower + plan, emit. The passes themselves are the list in :mod:`ninferc.ir.passes`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ninferc.errors import NinfercError

if TYPE_CHECKING:
    from ninferc.targets.arch import Arch
    from ninferc.targets.target import Target


#: the smallest --max-context an artifact is compiled for: one prompt token and one generated token
MIN_CONTEXT = 2


def compile_model(
    model_dir: str | Path,
    target: Target | str | Arch,
    out: str | Path,
    *,
    sku: str | None = None,
    sms: int | None = None,
    max_context: int = 4096,
    page_size: int = 64,
    weights: str = "bf16",
    kv_dtype: str = "bf16",
    dump_ir: str | Path | None = None,
    log: Callable[[str], None] = lambda s: None,
    progress=None,
    kernel_progress=None,
) -> dict:
    """Compile ``model_dir`` for ``target`` into the artifact ``out``: a :class:`~ninferc.targets.target.Target`
    (``ninferc compile`` parses one from its options), or an arch name with ``sku`` or ``sms`` (converted once by
    :func:`ninferc.targets.target.as_target`, for scripts and tests).

    ``weights`` is the weight recipe (``bf16``, ``w8``, ``w4``, optionally ``,group=format`` overrides:
    :func:`ninferc.ir.quant.recipe`), ``kv_dtype`` the KV cache dtype (``bf16`` or ``int8``).
    Returns the artifact header (dict).

    Raises:
        ConfigError / CheckpointError: bad checkpoint, or ``max_context`` beyond the model's
            max_position_embeddings; TargetError: unknown arch/SKU;
        QuantError / ShapeError: a malformed recipe or KV dtype;
        PlanError: neither a SKU nor an SM count, an SM count contradicting the SKU, or a launch that does not fit
            the target; CompileError: NVRTC failure.
    """
    from ninferc.artifact import LazyTensor, write_artifact
    from ninferc.checkpoint import Checkpoint
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph
    from ninferc.ir.weights import NP_DTYPES, GraphWeights
    from ninferc.targets.lower import check_page_size
    from ninferc.targets.model_plan import plan_model
    from ninferc.targets.target import as_target

    target = as_target(target, sku, sms)                          # the one conversion of an arch name
    model_dir = Path(model_dir)
    ck = Checkpoint(model_dir)                                    # load: config + lazily read weights
    ck.config.check_context(max_context)
    check_page_size(page_size)                                    # before any work: the KV page's rule
    if max_context < MIN_CONTEXT:
        raise NinfercError(f"--max-context {max_context} leaves no room for a prompt token and a generated one "
                           f"(at least {MIN_CONTEXT})")
    from ninferc.tokenizer import Tokenizer

    Tokenizer.from_dir(model_dir).check_fits(ck.config.vocab_size, f"{model_dir}/config.json")  # ids the model has
    graph = build_graph(ck.config, lm_rows="last")                # build: the IR of one model step
    graph = run_pipeline(graph, weights=weights, kv_dtype=kv_dtype,  # passes: validate, fuse, formats, memory
                         dump_dir=dump_ir)
    for name, why in graph.meta.get("format_fallbacks", {}).items():
        log(f"weights: {name} {why}")
    from ninferc.ir.passes import PIPELINE

    n_passes = len(graph.meta["passes"])  # the transforming passes (each marks the graph); the rest are checks
    log(f"graph: {sum(graph.count_ops().values())} ops after {n_passes} passes and {len(PIPELINE) - n_passes} shape "
        "checks")
    mp = plan_model(graph, target,                                # lower + plan: kernels compiled for the
                    max_context=max_context, page_size=page_size,  # target, resources read, launches checked
                    progress=kernel_progress)
    log(f"plan: {len(mp.kernels)} kernels for {mp.target} ({mp.sms} SMs)")
    mg = mtp_plan = None
    if ck.config.mtp_num_hidden_layers:                           # the MTP head: its own small graph through the
        from ninferc.ir.qwen3_5 import build_mtp_graph              # same passes and recipe (class mtp), lowered
                                                                    # and planned for the target like the model
        mg = run_pipeline(build_mtp_graph(ck.config, lm_rows="last"), weights=weights, kv_dtype=kv_dtype)
        mtp_plan = plan_model(mg, target, max_context=max_context, page_size=page_size,
                              progress=kernel_progress)
        log(f"mtp: {ck.config.mtp_num_hidden_layers} MTP layer(s) for speculative decoding, "
            f"{len(set(mtp_plan.kernels) - set(mp.kernels))} more kernels")
    gw = GraphWeights(graph, ck)                                  # emit: weights as the kernels want them
    tensors = {name: LazyTensor(shape, NP_DTYPES[dtype], (lambda n=name: gw[n]))
               for name, (shape, dtype) in gw.storage().items()}
    blobs, kernels = {}, []
    all_specs = {**(mtp_plan.kernels if mtp_plan is not None else {}), **mp.kernels}
    resources = {**(mtp_plan.resources if mtp_plan is not None else {}), **mp.resources}
    for uri, spec in sorted(all_specs.items()):
        src = spec.render().encode()
        blobs[f"kernel/{uri}.cu"] = src
        kernels.append({"uri": uri, "family": spec.family, "template": spec.template, "entry": spec.entry,
                        "params": [list(p) for p in spec.params], "threads": spec.threads,
                        "cooperative": spec.cooperative, "source_sha256": hashlib.sha256(src).hexdigest(),
                        "source_blob": f"kernel/{uri}.cu", "resources": resources[uri].to_json()})
    mtp_json = None
    if mg is not None:                                            # the head's weights, stored beside the model's
        mgw = GraphWeights(mg, ck)
        for name, (shape, dtype) in mgw.storage().items():
            if name not in tensors:
                tensors[name] = LazyTensor(shape, NP_DTYPES[dtype], (lambda n=name: mgw[n]))
        mtp_json = mg.to_json()
    for fname in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"):
        f = model_dir / fname
        if f.is_file():
            blobs[fname] = f.read_bytes()
    if "tokenizer.json" not in blobs:
        raise NinfercError(f"{model_dir}: no tokenizer.json to embed")
    header = {
        "model": ck.config.to_dict(),
        "target": {"arch": mp.target, "sku": mp.sku.key if mp.sku else None, "sms": mp.sms},
        "compile": {"max_context": max_context, "page_size": page_size, "options": list(mp.options),
                    "weights": weights, "kv_dtype": kv_dtype, "nvrtc": f"{mp.nvrtc[0]}.{mp.nvrtc[1]}"},
        "graph": graph.to_json(),
        **({"mtp_graph": mtp_json} if mtp_json is not None else {}),
        "plan": mp.to_json(),
        "kernels": kernels,
    }
    write_artifact(out, header, tensors, blobs, progress=progress)
    log(f"wrote {out} ({Path(out).stat().st_size:,} bytes)")
    return header


