# Session 26, run 183: the README's CLI transcript again (the compile line now counts passes and shape checks), a
# bench of a compiled fixture artifact (the artifact path of ninferc bench, whose input checks now come before the
# GPU's), and the 27B bench (w8, w4) for one more host sample.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session26_b.sh
bash bench/gpu_demo.sh
source bench/gpu_setup.sh >/dev/null 2>&1
echo "== bench of the fixture artifact"
timeout 90 ninferc bench /tmp/tiny.ninfer --prompt-tokens 512,4096 --decode-tokens 32 --json $OUT/bench_tiny.json 2>&1 | tail -4
echo "== bench of the fixture artifact at its default prompt lengths (must refuse: 8,192 + 64 + 8 > 8,192)"
timeout 60 ninferc bench /tmp/tiny.ninfer 2>&1 | tail -2
bench_27b w8 w4
