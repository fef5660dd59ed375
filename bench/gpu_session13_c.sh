# Device run (session 13, c): same-process A/Bs (bench/family_ab.py) of the attention decode kernel's CTA size
# (128 threads planned: one key lane, each thread's P.V loop walks all 64 keys of a page in 4-byte loads; 256 / 512
# threads: 2 / 4 key lanes) and of the w8 one-token norm-input GEMVs at 256 threads, w8 at 512 and 8,192, w4 at 512.
# (gemv_coop.w8_tok1_* were removed after run 99, when w8 moved to the dp kernels: this script
# reproduces only at its commit.)
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session13_c.sh
source bench/gpu_setup.sh
ab() {  # ab NAME WEIGHTS CONTEXT VARIANT...
  local name=$1 w=$2 c=$3; shift 3
  timeout 170 python3 bench/family_ab.py --weights $w --context $c --rounds 4 --json $OUT/ab_$name.json "$@" \
    > /tmp/ab_$name.log 2>&1
  echo "ab $name rc $? $(el)"; grep -E "speed-up|Error|error" /tmp/ab_$name.log | tail -6
}
ab w8_512 w8 512 now attn256:attn_decode.threads=256 attn512:attn_decode.threads=512 "g256:gemv_coop.w8_tok1_shapes=((256,2),)"
ab w4_512 w4 512 now attn256:attn_decode.threads=256 attn512:attn_decode.threads=512
ab w8_8192 w8 8192 now attn256:attn_decode.threads=256 attn512:attn_decode.threads=512
