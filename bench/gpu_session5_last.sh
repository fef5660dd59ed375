# Device run (session 5, 43): the w4 mma GEMV with the offset taken off by a second mma. GEMV GPU tier for w4; the w4
# sweep at T = 1 and 4; the engine tier; the 27B w4 bench (registered default: mma for the 4-token tile) and the
# same with mma at T = 1 too (patched in-process). Run as NINFERC_COMMIT=<hash> bash bench/gpu_session5_last.sh
source bench/gpu_setup.sh
gpu_tests gemv_w4 100 tests/targets/test_gemv_coop_gpu.py -k "w4"
rm -f $OUT/*.xml
for T in 1 4; do
  timeout 60 python3 bench/gemv_ksplit_sweep.py --formats w4 --tokens $T --json $OUT/sweep_w4_t$T.json > $OUT/sweep_w4_t$T.log 2>&1
  echo "sweep T=$T rc $?"; grep -E "^w4 " $OUT/sweep_w4_t$T.log | sed 's/planner [^|]*|/|/'; el
done
gpu_tests engine 90 tests/runtime
rm -f $OUT/*.xml
B="ninferc bench --preset qwen3.8-27b --synthetic-weights --decode-tokens 48 --weights w4"
timeout 60 $B --prompt-tokens 512,8192 --json $OUT/bench_w4.json > $OUT/bench_w4.log 2>&1
echo "w4 rc $?"; grep -A3 "^context" $OUT/bench_w4.log; el
timeout 50 python3 -c "
import sys
from ninferc.targets.kernels import FAMILIES
FAMILIES['gemv_coop'].w4_mma_tiles = (1, 4)
from ninferc.cli import main
sys.argv = ['ninferc', 'bench', '--preset', 'qwen3.8-27b', '--synthetic-weights', '--decode-tokens', '48', '--weights', 'w4',
            '--prompt-tokens', '512', '--json', '$OUT/bench_w4_mma1.json']
main()
" > $OUT/bench_w4_mma1.log 2>&1; echo "w4 mma-at-T=1 rc $?"; grep -A2 "^context" $OUT/bench_w4_mma1.log; el
