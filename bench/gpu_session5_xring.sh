# Device run (session 5, 42): the w4 mma ring also carries each chunk's x (no x load in the math). GEMV GPU tier
# for w4; the probe; the w4 sweep at T = 1 and 4; the 27B w4 bench with mma at T = 1 too (w4_mma_tiles patched
# in-process; the registered default is the 4-token tile only). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_xring.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 120 tests/targets/test_gemv_coop_gpu.py -k "w4"
rm -f $OUT/*.xml
timeout 60 python3 bench/w4_stream_probe.py --json $OUT/w4_probe.json > $OUT/w4_probe.log 2>&1; echo "probe rc $?"; cat $OUT/w4_probe.log; el
for T in 1 4; do
  timeout 100 python3 bench/gemv_ksplit_sweep.py --formats w4 --tokens $T --json $OUT/sweep_w4_t$T.json > $OUT/sweep_w4_t$T.log 2>&1
  echo "sweep T=$T rc $?"; grep -E "^w4 " $OUT/sweep_w4_t$T.log | sed 's/planner [^|]*|/|/'; el
done
timeout 120 python3 -c "
import sys
from ninferc.targets.kernels import FAMILIES
FAMILIES['gemv_coop'].w4_mma_tiles = (1, 4)
from ninferc.cli import main
sys.argv = ['ninferc', 'bench', '--preset', 'qwen3.8-27b', '--synthetic-weights', '--decode-tokens', '48', '--weights', 'w4',
            '--prompt-tokens', '512', '--json', '$OUT/bench_w4_mma1.json']
main()
" > $OUT/bench_w4_mma1.log 2>&1; echo "w4 mma-at-T=1 rc $?"; grep -A2 "^context" $OUT/bench_w4_mma1.log; el
