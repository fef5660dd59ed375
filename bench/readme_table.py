"""Print the README's performance table (markdown) from a bench/results/*.json file.

Usage: python bench/readme_table.py bench/results/<file>.json
"""

import json
import sys


def table(d: dict) -> str:
    rows = [f"Measured {d['date']} on {d['gpu']} ({d['sms']} SMs), commit {d['commit']}, weights {d['weights']}, "
            f"target {d['target']}; copy bandwidth {d['copy_bandwidth_gbps']:,.0f} GB/s, bf16 matmul ceiling "
            f"{d['matmul_peak_tflops']:.0f} TFLOP/s (PyTorch), same process. Command: `{d['command']}`.",
            "",
            "| context | decode tok/s | roofline tok/s | fraction of roofline | prompt | prefill tok/s | TTFT ms | TFLOP/s | fraction of matmul ceiling |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for dec, pre in zip(d["decode"], d["prefill"]):
        rows.append(f"| {dec['context']} | {dec['tok_s']:.1f} | {dec['roofline_tok_s']:.1f} | "
                    f"{dec['fraction_of_roofline']:.1%} | {pre['prompt_tokens']} | {pre['tok_s']:,.0f} | "
                    f"{pre['ttft_ms']:,.0f} | {pre['tflops']:.0f} | {pre.get('fraction_of_matmul_peak', float('nan')):.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(json.loads(open(sys.argv[1]).read())))
