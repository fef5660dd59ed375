"""`ninferc bench (ARTIFACT | --preset NAME --synthetic-weights) ...`: speed on this GPU vs its roofline."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ninferc.errors import NinfercError


@click.command("bench")
@click.argument("artifact", required=False, type=click.Path(path_type=Path))
@click.option("--preset", default=None, help="model shape to benchmark without a checkpoint (e.g. qwen3.8-27b)")
@click.option("--synthetic-weights", is_flag=True, help="with --preset: random weights generated on the GPU")
@click.option("--target", default=None, help="with --preset: the target arch to plan for (default: the device's)")
@click.option("--sku", default=None, help="with --preset: the SKU to plan for (default: the device's SM count)")
@click.option("--weights", "weights_fmt", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="with --preset: weight format of the synthetic weights (as ninferc compile --weights)")
@click.option("--recipe", default=None, help="with --preset: per-class overrides of --weights")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default="bf16", show_default=True,
              help="with --preset: KV cache dtype")
@click.option("--prompt-tokens", default="512,8192", show_default=True, help="comma-separated prompt lengths")
@click.option("--decode-tokens", default=64, type=click.IntRange(min=1), show_default=True, help="decode steps timed per prompt length")
@click.option("--prefill-chunk", default=8192, type=click.IntRange(min=1), show_default=True,
              help="most prompt tokens per prefill step (a longer prompt is prefilled in chunks)")
@click.option("--batch", default=1, type=click.IntRange(min=1), show_default=True,
              help="also decode this many sequences together at each prompt length (aggregate tok/s)")
@click.option("--tokens-per-seq", default=None,
              help="also time steps of one sequence x T tokens with logits for every token (a speculative verify "
                   "step), comma-separated T in 2..64, against the one-token step: the prefill program, and with "
                   "--spec mtp --draft-tokens K >= T - 1 also the verify program")
@click.option("--spec", type=click.Choice(["mtp"]), default=None,
              help="also time speculative decoding with the MTP head (a synthetic preset gets one): the draft and "
                   "verify steps against the plain step, and tok/s at a forced acceptance (--accept-rate)")
@click.option("--draft-tokens", default=3, type=click.IntRange(1, 5), show_default=True, help="with --spec: K")
@click.option("--accept-rate", default=0.76, type=float, show_default=True,
              help="with --spec: the forced share of drafts accepted (synthetic weights make real acceptance "
                   "meaningless); 0.76 at K = 3 asks 1 + 0.76 x 3 = 3.28 tokens per round on average, and the report "
                   "gives the tokens per round of the rounds drawn (3.21 over the 24 rounds of a 512-token prompt)")
@click.option("--draft-lm-head", type=click.Choice(["bf16", "w8", "w4"]), default="bf16", show_default=True,
              help="with --spec: the drafts' LM head format (the model's head quantised at load; verify keeps the full "
                   "head)")
@click.option("--spec-rounds", default=48, type=click.IntRange(min=1), show_default=True,
              help="with --spec: speculative rounds timed (after the plain steps that record their drafts)")
@click.option("--profile", is_flag=True, help="also time every kernel of one decode step and one prefill chunk (and "
              "of each --tokens-per-seq step), summed per kernel family")
@click.option("--peer", type=click.Choice(["hf"]), default=None,
              help="also run HF transformers on the same weights (zero-copy views of the engine's) in this "
                   "process, after our run, and report ours / peer")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="write results here")
def bench_cmd(artifact, preset, synthetic_weights, target, sku, weights_fmt, recipe, kv_dtype, prompt_tokens,
              decode_tokens, prefill_chunk, batch, tokens_per_seq, spec, draft_tokens, accept_rate, draft_lm_head,
              spec_rounds, profile, peer, json_path):
    """Measure copy bandwidth, prefill tok/s + TTFT and decode tok/s (1 / the median time between streamed ids,
    one graph-replayed step queued ahead; the step-by-step loop's figure beside it) and report
    the fraction of the memory roofline measured in the same process."""
    from ninferc.bench import copy_bandwidth_gbps, finish, matmul_peak_tflops, run_bench, write_json
    from ninferc.runtime.engine import Engine
    from ninferc.runtime.kernels import cupy

    def log(msg):
        click.echo(msg, err=True)

    try:
        lens = [int(x) for x in prompt_tokens.split(",")]
    except ValueError:
        raise NinfercError(f"--prompt-tokens needs comma-separated integers, found {prompt_tokens!r}") from None
    if min(lens) < 1:
        raise NinfercError(f"--prompt-tokens needs positive lengths, found {prompt_tokens!r}")
    tps: tuple[int, ...] = ()
    if tokens_per_seq is not None:
        try:
            tps = tuple(int(x) for x in tokens_per_seq.split(","))
        except ValueError:
            raise NinfercError(f"--tokens-per-seq needs comma-separated integers, found {tokens_per_seq!r}") from None
        if not all(2 <= t <= 64 for t in tps):
            raise NinfercError(f"--tokens-per-seq: each T must be in 2..64, found {tokens_per_seq!r}")
    # each prompt length is decoded twice from its prefill, step by step and then streamed (run_bench): the KV
    # capacity holds the prompt, both runs' decode_tokens and a few spare tokens
    max_ctx = max(lens) + 2 * decode_tokens + max(tps, default=0) + 8  # + the multi-token steps after the decodes
    if spec is None:
        for name, value, default in (("--draft-tokens", draft_tokens, 3), ("--accept-rate", accept_rate, 0.76),
                                     ("--spec-rounds", spec_rounds, 48), ("--draft-lm-head", draft_lm_head, "bf16")):
            if value != default:
                raise NinfercError(f"{name} applies with --spec mtp")
    else:
        import numpy as np

        from ninferc.bench import accepted_schedule

        accepted_schedule(accept_rate, draft_tokens, 1, np.random.default_rng(0))  # checks the rate
        # the spec rounds run on a fresh sequence after the others: prompt + the recorded continuation + a round
        max_ctx = max(max_ctx, max(lens) + (spec_rounds + 2) * (draft_tokens + 1) + 8)
    if (artifact is None) == (preset is None):
        raise NinfercError("give exactly one of ARTIFACT or --preset NAME --synthetic-weights")
    if preset is not None and not synthetic_weights:
        raise NinfercError("--preset needs --synthetic-weights (there is no checkpoint to read)")
    if artifact is not None and (weights_fmt != "bf16" or recipe or kv_dtype != "bf16" or synthetic_weights
                                 or target is not None or sku is not None):
        raise NinfercError("--weights/--recipe/--kv-dtype/--synthetic-weights/--target/--sku apply to --preset; an "
                           "artifact's formats and target were chosen by ninferc compile (and its launches are "
                           "planned for the GPU it runs on)")
    if json_path is not None:
        from ninferc.errors import output_problem

        why = output_problem(json_path, "--json", "bench.json")
        if why:
            raise NinfercError(why)
    from ninferc.ir.quant import recipe_name as make_recipe_name

    recipe_name = make_recipe_name(weights_fmt, recipe)  # a malformed recipe fails before the GPU
    # Every input that can be checked without a GPU is checked before the GPU is looked for, so a typo is
    # reported as a typo and not as a missing CUDA runtime.
    what_ctx = f"--prompt-tokens {max(lens)} + 2 x --decode-tokens {decode_tokens} (+ 8 spare), a KV capacity of"
    if preset is not None:
        from ninferc.ir.config import preset as get_preset
        from ninferc.targets.arch import get_arch
        from ninferc.targets.skus import get_sku

        get_preset(preset).check_context(max_ctx, what=what_ctx)
        # --target and --sku parsed once, here; without --target the arch is the device's and, without --sku, the
        # SM count too, so the Target is completed once the GPU is found (ninferc.bench.device_target)
        arch = get_arch(target) if target is not None else None
        sku_obj = get_sku(sku, arch) if sku is not None else None
        from ninferc.bench import synthetic_graph

        graph = synthetic_graph(preset, recipe_name, kv_dtype)  # the pipeline's recipe checks, before the GPU's
    else:
        from ninferc.artifact import Artifact

        art = Artifact.open(artifact)
        art.config.check_context(max_ctx, what=what_ctx)
        weights = art.header["compile"].get("weights", "bf16")
    cp = cupy("ninferc bench (it measures a GPU)", hint="")
    if preset is not None:
        from ninferc.bench import device_target, synthetic_artifact

        art = synthetic_artifact(preset, recipe_name, kv_dtype, target=device_target(arch, sku_obj),
                                 max_context=max_ctx, batch=batch, graph=graph, mtp=spec is not None)
        weights = f"{recipe_name} (synthetic)"
    log("measuring copy bandwidth and the bf16 matmul ceiling ...")
    copy = copy_bandwidth_gbps(cp)
    peak = matmul_peak_tflops()
    log(f"copy bandwidth {copy:,.0f} GB/s; bf16 matmul {peak if peak is None else round(peak, 1)} TFLOP/s")
    if spec is not None and art.mtp_graph() is None:
        raise NinfercError(f"--spec mtp: the artifact {artifact} carries no MTP head (its checkpoint declares none, "
                           "or it was compiled before 2026-12-05)")
    eng = Engine(art, max_context=max_ctx, prefill_chunk=min(prefill_chunk, max(lens)), max_batch=batch, log=log,
                 max_logit_rows=max(tps, default=batch), spec_tokens=draft_tokens if spec else 0,
                 draft_lm_head=draft_lm_head)
    res = run_bench(eng, prompt_tokens=lens, decode_tokens=decode_tokens, chunk=prefill_chunk, log=log,
                    profile=profile, batch=batch, tokens_per_seq=tps)
    if spec is not None:
        from ninferc.bench import spec_rounds as run_spec_rounds
        from ninferc.runtime.cuda_backend import CudaBatchBackend

        log(f"speculative rounds: K = {draft_tokens}, forced acceptance {accept_rate:.2f}, {spec_rounds} rounds at "
            f"context {max(lens)} ...")
        be = CudaBatchBackend.__new__(CudaBatchBackend)
        be._setup(eng, num_slots=batch, max_context=max_ctx, cuda_graph=True, spec_tokens=draft_tokens)
        res["spec"] = run_spec_rounds(be, prompt_tokens=max(lens), rounds=spec_rounds, accept_rate=accept_rate,
                                      chunk=eng.prefill_chunk, log=log)
        res["spec"]["draft_lm_head"] = draft_lm_head
    out = finish(res, engine=eng, copy_gbps=copy, peak_tflops=peak, weights=weights,
                 command="ninferc " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    if peer == "hf":
        from ninferc.peer_hf import peer_ratios, run_hf_peer_on_engine

        log("running the HF transformers peer on the same weights ...")
        out["peer"] = run_hf_peer_on_engine(eng, prompt_tokens=lens, decode_tokens=decode_tokens, log=log)
        out["peer_ratio"] = peer_ratios(out, out["peer"])
    lines = [f"{out['gpu']} ({out['sms']} SMs), copy {copy:,.0f} GB/s, matmul peak {peak or float('nan'):.0f} TFLOP/s",
             "context  decode tok/s  roofline tok/s  fraction  |  prompt  prefill tok/s  TTFT ms  TFLOP/s"]
    for d, p in zip(out["decode"], out["prefill"]):
        lines.append(f"{d['context']:>7}  {d['tok_s']:>12.2f}  {d['roofline_tok_s']:>14.2f}  "
                     f"{d['fraction_of_roofline']:>8.3f}  |  {p['prompt_tokens']:>6}  {p['tok_s']:>13,.0f}  "
                     f"{p['ttft_ms']:>7.0f}  {p['tflops']:>7.1f}")
    for d in out.get("batch_decode", []):
        lines.append(f"batched decode: {d['batch']} sequences at context {d['context']}: {d['tok_s']:,.1f} tok/s "
                     f"({d['median_step_ms']:.2f} ms per step; one sequence {d['single_tok_s']:.1f} tok/s)")
    for d in out.get("tokens_per_seq", []):
        if d["tokens"] > 1:
            lines.append(f"one sequence x {d['tokens']} tokens at context {d['context']}: {d['median_step_ms']:.2f} ms "
                         f"per step = {d['ratio_to_one']:.2f}x the one-token step")
    if "spec" in out:
        lines.append(spec_line(out["spec"]))
    if "peer" in out:
        pr = out["peer_ratio"]
        lines.append(f"peer {out['peer'].get('name')} {out['peer'].get('version')} (fast path "
                     f"{out['peer'].get('fast_path')}): ours / peer: "
                     + ", ".join(f"decode@{d['context']} {d['peer_tok_s']:.2f} tok/s -> x{d['ratio']:.1f}" for d in pr["decode"])
                     + "; " + ", ".join(f"prefill {p['prompt_tokens']} {p['peer_tok_s']:,.0f} tok/s -> x{p['ratio']:.2f}"
                                        for p in pr["prefill"]))
    click.echo("\n".join(lines))
    if json_path:
        write_json(out, json_path)
        log(f"wrote {json_path}")


def spec_line(sp: dict) -> str:
    """The report line of ``ninferc bench --spec mtp``: :func:`ninferc.bench.spec_rounds`'s dict (step and round
    medians in ms, the speed at the asked acceptance profile and at the measured one, two-read and one-read rounds)."""
    return (f"spec mtp K = {sp['draft_tokens']} at context {sp['prompt_tokens']}: verify step "
            f"{sp['verify_step_ms']:.2f} ms = {sp['verify_ratio']:.2f}x the plain step ({sp['plain_step_ms']:.2f} "
            f"ms), draft step {sp['draft_step_ms']:.2f} ms = {sp['draft_step_ratio']:.2f}x; round "
            f"{sp['round_ms']:.2f} ms"
            + (f", with one host read {sp['one_read_round_ms']:.2f} ms" if "one_read_round_ms" in sp else "")
            + f"; at the asked profile ({sp['accept_rate_asked']:.2f}, {sp['schedule_tokens_per_round']:.2f} "
            f"tokens per round): {sp['profile_tok_s']:.1f} tok/s against {sp['plain_tok_s']:.1f} plain = "
            f"{sp['profile_speedup']:.2f}x"
            + (f", one read {sp['one_read_profile_tok_s']:.1f} tok/s = {sp['one_read_profile_speedup']:.2f}x"
               if "one_read_profile_tok_s" in sp else "")
            + f"; measured acceptance {sp['accept_rate']:.2f} ({sp['tokens_per_round']:.2f} tokens per round): "
            f"{sp['tok_s']:.1f} tok/s = {sp['speedup']:.2f}x"
            + (f", one read {sp['one_read_tok_s']:.1f} tok/s = {sp['one_read_speedup']:.2f}x"
               if "one_read_tok_s" in sp else ""))
