# Session 21, run 151: the fused decode MLP's down items in row-block-major order (consecutive items read consecutive
# slices of the same W_down rows) and with two-step slices (kslice 2048 / 1024 at 2 rows per warp), all under the
# 64-register cap (4 CTAs/SM; run 150: 1.076x over 3 CTAs/SM); same-process A/Bs against the two GEMVs at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session21_e.sh
source bench/gpu_setup.sh
python3 - <<'PY'
from ninferc.targets.kernels.mlp_decode import MlpDecodeFamily, MlpProblem
from ninferc.targets.plan import compile_variants
from ninferc.runtime.kernels import device_arch
for ks, rows in (({"w4": 1024, "w8": 512}, 4), ({"w4": 2048, "w8": 1024}, 2)):
    f = MlpDecodeFamily(kslice=ks, dn_rows=rows, min_ctas={"w4": 4, "w8": 4})
    for u, (c, r) in compile_variants([f.spec(MlpProblem(5120, 17408, w)) for w in ("w4", "w8")], device_arch()).items():
        print(u, "regs", r.registers, "local", r.local_bytes)
PY
C4="mlp_decode.min_ctas={'w4':4,'w8':4}"
KS="mlp_decode.kslice={'w4':2048,'w8':1024};mlp_decode.dn_rows=2"
ab_run w4_order_512 w4 150 --context 512 --max-context 8248 "unfused:mlp_decode.enabled=False" "cap4:$C4" \
  "row:$C4;mlp_decode.dn_order='row'" "ks2:$C4;$KS" "row_ks2:$C4;mlp_decode.dn_order='row';$KS"
ab_run w8_order_512 w8 120 --context 512 --max-context 8248 "unfused:mlp_decode.enabled=False" \
  "row:$C4;mlp_decode.dn_order='row'" "row_ks2:$C4;mlp_decode.dn_order='row';$KS"
cp /tmp/ab_*.log $OUT/; rm -f $OUT/*.xml
