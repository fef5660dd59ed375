# Device run 1: every kernel's GPU tests + the occupancy/driver cross-check. Logs under $OUT.
source bench/gpu_setup.sh
python3 -m pytest tests/kernels tests/targets -m gpu -q --tb=short -rf --timeout 240 -p no:cacheprovider \
  --junitxml=$OUT/kernels.xml 2>&1 | tee $OUT/kernels.log | tail -60
