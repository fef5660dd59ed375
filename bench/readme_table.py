"""Print the README's performance tables (markdown) from bench/results/*.json files.

Usage: python bench/readme_table.py [--peer <file>.json] bench/results/<bf16>.json [<w8>.json <w4>.json ...]
The first file gives the provenance line and, when it has ``peer``, the HF transformers comparison (or the
``--peer`` file's, with its commit named); every file gives one row per context / prompt length.
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


if __name__ == "__main__":
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
