"""The kernel-family rows of `ninferc bench --profile` (and bench/graph_profile.py): GEMV / GEMM steps keep
their projection without the layer prefix, every other family is one row."""

from ninferc.bench import family_key, profile_table


def test_family_key():
    assert family_key("L12.mlp.down", "gemv") == "gemv:mlp.down"
    assert family_key("L3.gdn.in_qkv_in_z_in_b_in_a", "gemm") == "gemm:gdn.in_qkv_in_z_in_b_in_a"
    assert family_key("lm_head", "gemv") == "gemv:lm_head"
    assert family_key("L7.attn.mixer.decode", "attn_decode") == "attn_decode"


def test_profile_table_sums_layers_into_one_row():
    rows = [("L0.mlp.down", "gemv", 1.0), ("L1.mlp.down", "gemv", 2.0), ("L1.gdn.mixer.decode",
            "gdn_recurrent", 0.5)]
    txt, agg = profile_table(rows, "decode")
    assert agg == {"gemv:mlp.down": 3.0, "gdn_recurrent": 0.5}
    assert "3.500 ms in 3 launches" in txt
