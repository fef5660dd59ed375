# Session 21, run 149: the fused decode MLP with carries (each item loads the next item's first weight vectors: a
# gate|up item in its last step, a down item after its dot products; releases after those loads) and its two phases
# in two loops (registers: 76 / 71 on NVRTC 13.5); same-process A/Bs against the two GEMVs, under a 64-register cap,
# and without fences (probe), at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_c.sh
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
gpu_tests mlp 60 tests/kernels/test_mlp_decode_gpu.py
ab_run w4_carry_512 w4 130 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False" \
  "cap4:mlp_decode.min_ctas={'w4':4,'w8':4}" "nofence:mlp_decode.probe_nofence=True"
ab_run w8_carry_512 w8 120 --context 512 --max-context 8248 now "unfused:mlp_decode.enabled=False" \
  "cap4:mlp_decode.min_ctas={'w4':4,'w8':4}"
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
