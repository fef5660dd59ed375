# Session 23, run 163: attn_decode's ring of three K/V tile buffers (AttnDecodeFamily.stage_slots = 3). GPU tests
# (attention decode with the ring, the driver's occupancy, the engine: ring == global bit for bit), the device's
# decode rows, then same-process A/Bs of the 27B step against the planned 2-buffer kernel: w8 at 8,192 of 8,448 and
# 512 of 8,248, w4 at 8,192; the w8 kernel timeline at 8,192 with the ring.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session23_b.sh
source bench/gpu_setup.sh
gpu_tests attn 150 tests/kernels/test_attention_gpu.py -k "ring or occupancy"
gpu_tests engine 120 tests/runtime/test_engine_gpu.py -k "staged_attention_decode and ring"
timeout 60 python3 - <<'PY' 2>&1 | tail -4
from ninferc.targets.kernels import attention as A
from ninferc.targets.plan import PlanContext, compile_variants
p = A.AttentionProblem(24, 4, 256, 64, 1e7, 1e-6, page_size=64, max_pages=132)
for slots in (2, 3):
    fam = A.AttnDecodeFamily(stage_slots=slots)
    ctx = PlanContext("sm_90", 132, {u: r for u, (_, r) in compile_variants(fam.variants(p), "sm_90").items()})
    spec, dyn = fam.choose(p, ctx)
    r = ctx.resources_of(spec)
    print("slots", slots, spec.uri, "regs", r.registers, "local", r.local_bytes, "smem", r.static_smem_bytes + dyn,
          "CTAs/SM", ctx.occupancy(spec, dyn).ctas_per_sm, "splits", fam.splits(p, 1, ctx))
PY
echo "rows $(el)"
ab_run w8_ring_8192 w8 110 --context 8192 --max-context 8448 now "ring:attn_decode.stage_slots=3"
ab_run w8_ring_512 w8 80 --context 512 --max-context 8248 now "ring:attn_decode.stage_slots=3"
timeout 60 python3 bench/graph_profile.py --weights w8 --context 8192 --max-context 8448 --set attn_decode.stage_slots=3 \
  --json $OUT/gp_w8_ring_8192.json > /tmp/gp_ring.log 2>&1; echo "gp ring rc $? $(el)"; grep -E "attn_|step wall" /tmp/gp_ring.log | cut -c1-130
ab_run w4_ring_8192 w4 100 --context 8192 --max-context 8448 now "ring:attn_decode.stage_slots=3"
cp /tmp/ab_*.log $OUT/
