# Device run: the whole GPU tier (kernels, plans vs driver, engine end to end). Logs under $OUT.
source bench/gpu_setup.sh
python3 -m pytest tests -m gpu -q --tb=short -rf --timeout 300 -p no:cacheprovider \
  --junitxml=$OUT/suite.xml "$@" 2>&1 | tee $OUT/suite.log | tail -40
