# Device run (session 16, a): a weight ring only on the dp GEMVs whose producer leaves most SMs idle (GDN out after
# gdn_decode's 48 CTAs, attention o after attn_combine's 24: K = 6,144 at 640 threads), so their CTAs on the free SMs
# fill ring - 1 weight steps (up to ~200 KB per SM) before the PDL wait; down keeps no ring (its producer, gate|up,
# fills every SM). GPU tests of the deep rings, then same-process A/Bs of the 27B decode step at 512.
# Run as NINFERC_COMMIT=<hash> bash bench/gpu_session16_a.sh
source bench/gpu_setup.sh
gpu_tests ring 90 tests/targets/test_gemv_coop_gpu.py -k "persistent_dp_many and (ring8 or ring10)"
ab_run w8_ring w8 230 now "ring10:gemv_coop.dp_ring=10;gemv_coop.dp_ring_at=((6144,640),)" \
  "ring6:gemv_coop.dp_ring=6;gemv_coop.dp_ring_at=((6144,640),)"
ab_run w4_ring w4 230 now "ring8:gemv_coop.dp_ring=8;gemv_coop.dp_ring_at=((6144,640),)" \
  "ring5:gemv_coop.dp_ring=5;gemv_coop.dp_ring_at=((6144,640),)"
