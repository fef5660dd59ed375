# Device run: the GPU tier (default: the whole tests/ tree; or the paths given). Logs under $OUT.
source bench/gpu_setup.sh
NINFERC_REQUIRE_GPU=1 python3 -m pytest "${@:-tests}" -m gpu -q --tb=short -rf --timeout 300 -p no:cacheprovider \
  --junitxml=$OUT/suite.xml 2>&1 | tee $OUT/suite.log | tail -40
