# Session 21, run 148: where the fused decode MLP's time goes (run 147: 1.21x slower than the two GEMVs): the same
# kernel launched without the cooperative attribute (PDL alone), without its item-level fences (a probe: results
# may be wrong), and under a 64-register cap (4 CTAs/SM); same-process A/Bs of the 27B step at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_b.sh
source bench/gpu_setup.sh
python3 - <<'PY'
from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem
from ninferc.targets.plan import compile_variants
from ninferc.runtime.kernels import device_arch
for mc in (1, 4):
    f = MlpDecodeFamily(min_ctas={"w4": mc, "w8": mc})
    for u, (c, r) in compile_variants([f.spec(MlpProblem(5120, 17408, w)) for w in ("w4", "w8")], device_arch()).items():
        print(u, "regs", r.registers, "local", r.local_bytes)
PY
ab_run w4_probe_512 w4 150 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False" \
  "nocoop:mlp_decode.cooperative=False" "nofence:mlp_decode.probe_nofence=True" "cap4:mlp_decode.min_ctas={'w4':4,'w8':4}"
ab_run w8_probe_512 w8 120 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False" \
  "nofence:mlp_decode.probe_nofence=True" "cap4:mlp_decode.min_ctas={'w4':4,'w8':4}"
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
