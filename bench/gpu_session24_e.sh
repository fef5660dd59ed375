# Session 24, run 174: the decode loop without host stream work between steps -- the sampler advances the decode
# metadata on the device (sample kernel: tok_pos / seq_ctx += 1) and writes each id into pinned host memory
# (Engine.ids_host), so decode_stream uploads metadata only when a page is added or an id half fills, and copies
# nothing. GPU tests (sampler, engine: goldens, graph == eager, decode_stream == the step loop, the new long-stream
# test), then the bench for w8 and w4 (README rows) and the step-gap probe at 512 (the old loop's forms).
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session24_e.sh
source bench/gpu_setup.sh
gpu_tests sample 90 tests/kernels/test_sample_gpu.py
gpu_tests engine 200 tests/runtime/test_engine_gpu.py tests/runtime/test_quant_gpu.py
bench_27b w8 w4
timeout 100 python3 bench/step_gap_probe.py --weights w8 --context 512 --max-context 8248 --json $OUT/gap_512.json \
  > $OUT/gap_512.log 2>&1; echo "gap 512 rc $? $(el)"; grep -E "per step|Error" $OUT/gap_512.log
rm -f $OUT/*.xml
