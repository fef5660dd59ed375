"""Print the README's performance tables (markdown) from bench/results/*.json files.

Usage: python bench/readme_table.py [--peer <file>.json] bench/results/<bf16>.json [<w8>.json <w4>.json ...]
The first file gives the provenance line and, when it has ``peer``, the HF transformers comparison (or the
``--peer`` file's, with its commit named); every file gives one row per context / prompt length.

       python bench/readme_table.py --serve [--device H100] bf16=<serve_27b_bf16>.json [w4=<serve_27b_w4>.json ...]
The serving table: per weight format (the label; ``serve_bench.py``'s JSON does not know the server's weights)
aggregate tok/s, per-request decode tok/s p50 from the server's log and client TTFT p50 / p99, one column per
concurrency level.

       python bench/readme_table.py --mtp [--device H100] <mtp_27b_bf16>.json [<mtp_27b_w4>.json ...]
The MTP table: per ``ninferc bench --spec mtp`` JSON, the plain, verify and draft steps, the one-read round and
tok/s at the forced acceptance profile. ``tests/ninferc/test_readme_tables.py`` checks that README.md holds the
tables these print from the files it cites.
"""

import json
import sys


def _fmt(d: dict) -> str:
    w = d["weights"].replace(" (synthetic)", "")
    return f"{w}, KV {d.get('kv_dtype', 'bf16')}"


def table(files: list[dict], peer: dict | None = None) -> str:
    """Markdown: the provenance line of ``files[0]``, one row per decode context / prefill length of every file,
    and the HF comparison of ``peer`` (a bench result with ``peer`` / ``peer_ratio``; default ``files[0]``)."""
    d0 = files[0]
    pd = peer if peer is not None else d0
    rows = [f"Measured {d0['date']} on {d0['gpu']} ({d0['sms']} SMs), target {d0['target']}, synthetic weights of the "
            f"qwen3.8-27b shape; each run measures its own copy bandwidth (roofline) and bf16 matmul ceiling "
            f"(PyTorch) in the same process. Commits and commands are in the JSON files.",
            "",
            "| weights | context | decode tok/s | GB read / token | roofline tok/s | fraction of roofline | prompt | prefill tok/s | TTFT ms | fraction of matmul ceiling | commit |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for d in files:
        for dec, pre in zip(d["decode"], d["prefill"]):
            rows.append(f"| {_fmt(d)} | {dec['context']} | {dec['tok_s']:.1f} | {dec['bytes_per_token'] / 1e9:.1f} | "
                        f"{dec['roofline_tok_s']:.1f} | {dec['fraction_of_roofline']:.1%} | {pre['prompt_tokens']} | "
                        f"{pre['tok_s']:,.0f} | {pre['ttft_ms']:,.0f} | "
                        f"{pre.get('fraction_of_matmul_peak', float('nan')):.1%} | {d['commit']} |")
    if "peer" in pd:
        p = pd["peer"]
        rows += ["", (f"From the run of commit {pd['commit']} ({pd['date']}): " if pd is not d0 else "") +
                 f"Same process, same weights (zero-copy views of the engine's): {p['name']} {p['version']} "
                 f"(torch {p.get('torch')}, attention {p.get('attn_implementation')}, flash-linear-attention "
                 f"and causal-conv1d kernels {'used' if p.get('fast_path') else 'not available on the device (fla: false in the JSON): PyTorch fallback for the GDN layers'}).", "",
                 "| | context / prompt | ninferc tok/s | HF tok/s | ninferc / HF |", "|---|---:|---:|---:|---:|"]
        for r in pd["peer_ratio"]["decode"]:
            rows.append(f"| decode | {r['context']} | {r['tok_s']:.1f} | {r['peer_tok_s']:.2f} | {r['ratio']:.1f}x |")
        for r in pd["peer_ratio"]["prefill"]:
            rows.append(f"| prefill | {r['prompt_tokens']} | {r['tok_s']:,.0f} | {r['peer_tok_s']:,.0f} | {r['ratio']:.2f}x |")
    return "\n".join(rows)


def serve_table(labelled: list[tuple[str, dict]], device: str) -> str:
    """Markdown: the serving table of ``bench/serve_bench.py`` results, one ``(label, result)`` per weight format;
    columns are the first result's concurrency levels (every result must have the same). ``device`` heads the
    first column. Raises ValueError when the results' levels differ."""
    levels = [lv["concurrency"] for lv in labelled[0][1]["levels"]]
    for label, d in labelled:
        if [lv["concurrency"] for lv in d["levels"]] != levels:
            raise ValueError(f"{label}: concurrency levels {[lv['concurrency'] for lv in d['levels']]} differ from "
                             f"{labelled[0][0]}'s {levels}")
    rows = [f"| {device} | " + " | ".join(f"C = {c}" for c in levels) + " |", "|---|" + "---:|" * len(levels)]
    for label, d in labelled:
        lv = d["levels"]
        rows.append(f"| {label} aggregate tok/s (clients) | " + " | ".join(f"{x['aggregate_tok_s']:.1f}" for x in lv) + " |")
        rows.append(f"| {label} per-request decode tok/s, p50 (server log) | "
                    + " | ".join(f"{x['server']['decode_tok_s']['p50']:.1f}" for x in lv) + " |")
        rows.append(f"| {label} TTFT p50 / p99, ms (clients) | " + " | ".join(
            f"{x['client']['ttft_s']['p50'] * 1e3:,.0f} / {x['client']['ttft_s']['p99'] * 1e3:,.0f}" for x in lv) + " |")
    return "\n".join(rows)


def mtp_table(files: list[dict], device: str) -> str:
    """Markdown: one row per ``ninferc bench --spec mtp`` result (its ``spec`` object): plain, verify and draft step
    times with their ratios to the plain step, the round with one host read, and tok/s and speed-up at the forced
    acceptance profile over that round (the schedule's tokens per round). A result whose drafts read a narrower LM head
    (``spec.draft_lm_head`` other than bf16, ``--draft-lm-head``) says so in its row's first cell."""
    k = files[0]["spec"]["draft_tokens"]
    rows = [f"| {device}, K = {k} | plain step | verify step ({k + 1} tokens) | draft step | round (one host read) | "
            "tok/s at the profile | speed-up |", "|---|---:|---:|---:|---:|---:|---:|"]
    for d in files:
        sp = d["spec"]
        head = sp.get("draft_lm_head", "bf16")
        label = d["weights"].replace(" (synthetic)", "") + (f", drafts' LM head {head}" if head != "bf16" else "")
        rows.append(f"| {label} | {sp['plain_step_ms']:.2f} ms | "
                    f"{sp['verify_step_ms']:.2f} ms ({sp['verify_ratio']:.2f}x) | "
                    f"{sp['draft_step_ms']:.2f} ms ({sp['draft_step_ratio']:.2f}x) | {sp['one_read_round_ms']:.2f} ms | "
                    f"{sp['one_read_profile_tok_s']:.1f} ({sp['schedule_tokens_per_round']:.2f} / round) | "
                    f"{sp['one_read_profile_speedup']:.2f}x |")
    return "\n".join(rows)


def _usage(msg: str = "") -> None:
    sys.exit((msg + "\n" if msg else "") + "usage: readme_table.py [--peer PEER.json] RESULT.json [RESULT.json ...]\n"
             "       readme_table.py --serve [--device NAME] LABEL=SERVE.json [LABEL=SERVE.json ...]\n"
             "       readme_table.py --mtp [--device NAME] MTP.json [MTP.json ...]")


def _load(path: str) -> dict:
    try:
        return json.loads(open(path).read())
    except (OSError, ValueError) as exc:
        sys.exit(f"readme_table.py: cannot read {path}: {exc}")


if __name__ == "__main__":
    mode, rest = sys.argv[1:2], sys.argv[2:]
    device = "GPU"
    if mode in (["--serve"], ["--mtp"]) and rest[:1] == ["--device"]:
        if len(rest) < 2:
            _usage("--device takes a name (the first column's heading, e.g. H100)")
        device, rest = rest[1], rest[2:]
    if mode == ["--serve"]:
        if not rest or any("=" not in a for a in rest):
            _usage("--serve takes LABEL=FILE pairs (the label names the weight format, e.g. bf16=serve_27b_bf16.json)")
        print(serve_table([(a.split("=", 1)[0], _load(a.split("=", 1)[1])) for a in rest], device))
        sys.exit(0)
    if mode == ["--mtp"]:
        if not rest:
            _usage("--mtp takes one or more MTP bench JSON files")
        print(mtp_table([_load(f) for f in rest], device))
        sys.exit(0)
    args = sys.argv[1:]
    peer = None
    if args[:1] == ["--peer"]:
        if len(args) < 3:
            sys.exit("usage: readme_table.py [--peer PEER.json] RESULT.json [RESULT.json ...] (--peer needs a file "
                     "and at least one result file after it)")
        peer, args = json.loads(open(args[1]).read()), args[2:]
    if not args:
        sys.exit("usage: readme_table.py [--peer PEER.json] RESULT.json [RESULT.json ...]")
    print(table([json.loads(open(f).read()) for f in args], peer))
