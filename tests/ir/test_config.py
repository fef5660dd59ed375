"""Model config parsing, the 27B preset, and clear errors for bad checkpoint directories."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ninferc.checkpoint import Checkpoint
from ninferc.cli import main
from ninferc.errors import CheckpointError, ConfigError
from ninferc.ir.config import ModelConfig, preset
from ninferc.ir.qwen3_5 import param_specs
from ninferc.ir.summary import param_summary, state_summary
from ninferc.tokenizer import Tokenizer


def test_preset_27b_shape_and_counts():
    cfg = preset("qwen3.8-27b")
    assert cfg.num_hidden_layers == 65
    assert len(cfg.gdn_layers) == 49 and len(cfg.attention_layers) == 16
    assert cfg.attention_layers == tuple(i for i in range(65) if (i + 1) % 4 == 0)
    # parameter count by formula (independent of param_specs)
    H, I, V = 5120, 17408, 248320
    attn = H * (24 * 256 * 2) + 2 * H * (4 * 256) + (24 * 256) * H + 2 * 256
    qkv = 2 * 16 * 128 + 48 * 128
    gdn = H * qkv + H * 48 * 128 + 2 * H * 48 + qkv * 4 + 2 * 48 + 128 + 48 * 128 * H
    per_layer = 2 * H + 3 * H * I
    total = 2 * V * H + H + 65 * per_layer + 16 * attn + 49 * gdn
    s = param_summary(cfg)
    assert s["count"] == total == 27_279_271_648
    assert s["bytes_by_dtype"] == {"bf16": 2 * total}
    st = state_summary(cfg)
    assert st["kv_bytes_per_token"] == 16 * 2 * 4 * 256 * 2
    assert st["fixed_bytes"] == 49 * (qkv * 3 * 4 + 48 * 128 * 128 * 4)


@pytest.mark.slow  # seconds on 2 cores: the quick loop (-m "not slow") stays under 2 minutes
def test_inspect_preset_cli():
    r = CliRunner().invoke(main, ["inspect", "--preset", "qwen3.8-27b"])
    assert r.exit_code == 0, r.output
    assert "65 (49 gated-deltanet, 16 full attention)" in r.output
    assert "27,279,271,648" in r.output and "54,558,543,296 bytes" in r.output


def test_tiny_fixture_matches_index_metadata(tiny_dir, tiny_ckpt):
    """The index's totals count the MTP head (15 ``mtp.*`` tensors since 2026-12-04); so does param_summary."""
    index = json.loads((tiny_dir / "model.safetensors.index.json").read_text())
    meta = index["metadata"]
    assert tiny_ckpt.config.mtp_num_hidden_layers == 1
    s = param_summary(tiny_ckpt.config)
    assert s["count"] == meta["total_parameters"]
    assert sum(s["bytes_by_dtype"].values()) == meta["total_size"]
    mtp_names = sorted(n for n in index["weight_map"] if n.startswith("mtp."))
    assert len(mtp_names) == 15
    mtp_numel = sum(int(np.prod(tiny_ckpt[ir].shape)) for ir in tiny_ckpt if ir.startswith("mtp."))
    cfg_no_mtp = ModelConfig.from_dict({**tiny_ckpt.config.to_dict(), "mtp_num_hidden_layers": 0})
    assert param_summary(cfg_no_mtp)["count"] + mtp_numel == meta["total_parameters"]
    assert tiny_ckpt["L0.gdn.conv"].shape == (2 * 128 + 384, 4)
    assert tiny_ckpt["mtp.fc"].shape == (256, 512)


def _base():
    return json.loads(json.dumps({
        "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "rope_parameters": {"rope_theta": 1e6, "partial_rotary_factor": 0.25},
    }))


def test_layer_types_default_interval_rule():
    cfg = ModelConfig.from_hf_dict(_base())
    assert cfg.layer_types == ("linear_attention",) * 3 + ("full_attention",)


def test_qwen3_5_with_text_config_uses_language_model_prefix():
    cfg = ModelConfig.from_hf_dict({"model_type": "qwen3_5", "text_config": _base(), "tie_word_embeddings": True})
    assert cfg.weight_prefix == "model.language_model." and cfg.tie_word_embeddings
    assert "lm_head" not in param_specs(cfg)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(model_type="llama"), "model_type 'llama' is not supported"),
    (lambda d: d.pop("hidden_size"), "'hidden_size' is missing"),
    (lambda d: d.update(linear_num_value_heads=5), "linear_num_value_heads (5) is not a multiple of linear_num_key_heads (2)"),
    (lambda d: d.update(num_key_value_heads=3), "num_attention_heads (4) is not a multiple of num_key_value_heads (3)"),
    (lambda d: d.update(layer_types=["linear_attention"] * 3), "layer_types has 3 entries but num_hidden_layers is 4"),
    (lambda d: d.update(layer_types=["linear_attention"] * 3 + ["sliding"]), "layer_types[3] is 'sliding'"),
    (lambda d: d.update(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
    (lambda d: d.update(hidden_size=64.5), "hidden_size must be an integer, found 64.5"),
    (lambda d: d.update(num_hidden_layers="four"), "num_hidden_layers must be an integer, found 'four'"),
    (lambda d: d.update(vocab_size=True), "vocab_size must be an integer, found True"),
    (lambda d: d.update(max_position_embeddings=0), "max_position_embeddings must be a positive integer, found 0"),
    (lambda d: d.update(rope_parameters={"rope_theta": 0}), "rope_parameters.rope_theta must be positive, found 0"),
    (lambda d: d.update(rope_parameters={"rope_theta": -5.0}), "rope_parameters.rope_theta must be positive"),
    (lambda d: d.update(rope_parameters=[1e6]), "rope_parameters must be an object, found list"),
    (lambda d: d.update(eos_token_id=100), "eos_token_id 100 is outside the vocabulary 0..99"),
    (lambda d: d.update(eos_token_id=[3, -1]), "eos_token_id -1 is outside the vocabulary 0..99"),
    (lambda d: d.update(num_hidden_layers=10**6, layer_types=None), "num_hidden_layers 1000000 is implausible"),
    (lambda d: d.update(layer_types="linear_attention"), "layer_types must be a list, found str"),
])
def test_bad_config_errors_name_field_and_value(mutate, needle):
    d = _base()
    mutate(d)
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_hf_dict(d)
    assert needle in str(e.value)


@pytest.mark.parametrize("raw", [[1, 2], "qwen3_5_text", 7])
def test_config_json_that_is_not_an_object(tmp_path, raw):
    d = tmp_path / "ck"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        ModelConfig.from_dir(d)


def test_tokenizer_with_more_ids_than_the_model_is_refused(tmp_path, tiny_dir):
    """A tokenizer that can emit ids past vocab_size: refused by run, serve and compile before any work."""
    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["added_tokens"].append({"id": 4096, "content": "<|extra|>", "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True})  # one id past vocab_size
    (d / "tokenizer.json").chmod(0o644)
    (d / "tokenizer.json").write_text(json.dumps(tj))
    want = "tokenizer.json knows 4097 token ids but"
    for args in (["run", str(d), "--prompt", "x"], ["serve", str(d)],
                 ["compile", str(d), "--target", "sm_90", "--sku", "h200", "-o", str(tmp_path / "x.ninfer")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and want in r.output, (args, r.output)
        assert "Traceback" not in r.output


def test_qwen3_5_without_text_config():
    with pytest.raises(ConfigError, match="needs a 'text_config'"):
        ModelConfig.from_hf_dict({"model_type": "qwen3_5"})


def test_missing_dir_and_missing_config(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Checkpoint(tmp_path / "nope")
    with pytest.raises(ConfigError, match="has no config.json"):
        Checkpoint(tmp_path)


def test_checkpoint_problems_reported_together(tmp_path, tiny_dir):
    """Missing, unexpected and misshapen tensors are all listed in one error."""
    from safetensors.numpy import save_file
    import ml_dtypes

    d = tmp_path / "ck"
    d.mkdir()
    cfg = json.loads((tiny_dir / "config.json").read_text())
    del cfg["mtp_num_hidden_layers"]  # undeclared: a stray mtp tensor is skipped, not a problem
    (d / "config.json").write_text(json.dumps(cfg))
    ck = Checkpoint(tiny_dir, notice=None)
    tensors = {}
    from ninferc.ir.qwen3_5 import hf_name
    for ir in ck:
        if ir.startswith("mtp."):
            continue
        arr = np.asarray(ck[ir])
        if ir == "L0.gdn.conv":
            arr = arr[:, None, :]
        tensors[hf_name(ir, ck.config)] = arr
    del tensors["model.layers.2.mlp.up_proj.weight"]
    tensors["model.layers.1.mlp.down_proj.weight"] = np.zeros((256, 700), ml_dtypes.bfloat16)
    tensors["model.layers.0.extra.weight"] = np.zeros((2,), ml_dtypes.bfloat16)
    tensors["mtp.fc.weight"] = np.zeros((2,), ml_dtypes.bfloat16)
    for ir in ck:
        if ir.endswith(".gdn.conv") and ir != "L0.gdn.conv":
            tensors[hf_name(ir, ck.config)] = np.asarray(ck[ir])[:, None, :]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        Checkpoint(d, notice=None)
    msg = str(e.value)
    assert "3 problems" in msg
    assert "missing model.layers.2.mlp.up_proj.weight" in msg
    assert "misshapen model.layers.1.mlp.down_proj.weight: found [256, 700], config implies [256, 704]" in msg
    assert "unexpected model.layers.0.extra.weight" in msg
    assert "mtp" not in msg  # recognised and skipped


def test_mtp_tensors_loaded_when_declared(tiny_dir, tiny_ckpt):
    """The fixture's config declares the head (mtp_num_hidden_layers 1): its 15 tensors load under IR names."""
    from ninferc.ir.qwen3_5 import hf_name, mtp_param_specs

    specs = mtp_param_specs(tiny_ckpt.config)
    assert len(specs) == 15 and not tiny_ckpt.skipped
    index = json.loads((tiny_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert {hf_name(n, tiny_ckpt.config) for n in specs} == {n for n in index if n.startswith("mtp.")}
    for name, spec in specs.items():
        assert tiny_ckpt[name].shape == spec.shape, name


def test_mtp_tensors_skipped_with_notice_when_not_declared(tmp_path, tiny_dir):
    """A checkpoint carrying mtp.* tensors its config does not declare: skipped with a notice, never an error."""
    import io

    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["mtp_num_hidden_layers"]
    (d / "config.json").chmod(0o644)
    (d / "config.json").write_text(json.dumps(cfg))
    buf = io.StringIO()
    ck = Checkpoint(d, notice=buf)
    assert ck.config.mtp_num_hidden_layers == 0
    assert ck.skipped == {"multi-token-prediction head": 15}
    assert "skipping 15 tensors of the multi-token-prediction head" in buf.getvalue()
    assert not any(n.startswith("mtp.") for n in ck)
    # and with the index gone (every file scanned) the same
    (d / "model.safetensors.index.json").chmod(0o644)
    (d / "model.safetensors.index.json").unlink()
    assert Checkpoint(d, notice=None).skipped == {"multi-token-prediction head": 15}


def test_mtp_declared_but_missing_is_reported(tmp_path, tiny_dir):
    """A config declaring the head over shards without it: every missing mtp tensor is listed."""
    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    for f in (d / "model-mtp.safetensors", d / "model.safetensors.index.json"):
        f.chmod(0o644)
        f.unlink()
    with pytest.raises(CheckpointError) as e:
        Checkpoint(d, notice=None)
    assert "15 problems" in str(e.value) and "missing mtp.fc.weight" in str(e.value)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(mtp_num_hidden_layers=-1), "mtp_num_hidden_layers must be a non-negative integer, found -1"),
    (lambda d: d.update(mtp_num_hidden_layers=1.5), "mtp_num_hidden_layers must be a non-negative integer, found 1.5"),
    (lambda d: d.update(mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=True),
     "mtp_use_dedicated_embeddings=true is not supported"),
])
def test_bad_mtp_config_fields(mutate, needle):
    d = _base()
    mutate(d)
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_hf_dict(d)
    assert needle in str(e.value)


def test_checkpoint_problem_list_is_capped(tmp_path, tiny_dir):
    """A config declaring twice the layers its shards hold: the error names 20 problems and counts the rest."""
    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 16
    cfg["layer_types"] = cfg["layer_types"] * 2
    (d / "config.json").chmod(0o644)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        Checkpoint(d, notice=None)
    msg = str(e.value)
    n = int(msg.split("(")[1].split(" problems")[0])
    assert n > 40 and f"... and {n - 20} more" in msg and msg.count("\n  missing ") == 20


@pytest.mark.parametrize("name,where", [("model.layers.1.mlp.up_proj.weight", (3, 7)),
                                        ("model.embed_tokens.weight", (0, 0)),
                                        ("lm_head.weight", (4095, 0)),
                                        ("model.layers.0.input_layernorm.weight", (5,))])
def test_non_finite_weights_are_refused_by_run_and_compile(tmp_path, tiny_dir, name, where):
    """NaN / Inf in an MLP weight, the embedding, an LM-head row or a norm: every command that reads the weights says
    which tensor and how many values, instead of decoding garbage."""
    from safetensors.numpy import save_file
    from safetensors import safe_open

    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    index = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    shard = d / index[name]
    with safe_open(str(shard), framework="np") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    a = tensors[name].copy()
    a[where] = np.nan
    a.reshape(-1)[-1] = np.inf
    tensors[name] = a
    shard.chmod(0o644)
    save_file(tensors, str(shard), metadata={"format": "pt"})
    for args in (["run", str(d), "--prompt", "def f():", "--max-new", "2"],
                 ["compile", str(d), "--target", "sm_90", "--sku", "h200", "-o", str(tmp_path / "x.ninfer")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert f"tensor {name} has 2 non-finite values" in r.output and "Traceback" not in r.output


def _copy_with_index(tmp_path, tiny_dir, edit):
    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    idx = d / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    edit(data["weight_map"])
    idx.chmod(0o644)
    idx.write_text(json.dumps(data))
    return d


def test_index_naming_a_file_outside_the_directory_is_refused(tmp_path, tiny_dir):
    d = _copy_with_index(tmp_path, tiny_dir, lambda wm: wm.update({"lm_head.weight": "../elsewhere.safetensors"}))
    with pytest.raises(CheckpointError, match="'lm_head.weight' is mapped to '../elsewhere.safetensors', which is not"):
        Checkpoint(d, notice=None)


def test_hf_cache_layout_of_linked_files_loads(tmp_path, tiny_dir, goldens):
    """The Hugging Face cache's layout: snapshots/<sha>/NAME are relative links to ../../blobs/<hash> (they were
    refused as "not a file in" the folder until 2026-12-06); a link to a missing blob is named as one."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "0123abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(tiny_dir.iterdir())):
        shutil.copy(f, blobs / f"h{i}")
        os.symlink(Path("..") / ".." / "blobs" / f"h{i}", snap / f.name)
    ck = Checkpoint(snap, notice=None)
    assert sorted(ck.specs) and ck.config.num_hidden_layers > 0
    c = goldens["cases"][0]
    r = CliRunner().invoke(main, ["run", str(snap), "--prompt", c["prompt"], "--max-new", "3"])
    assert r.exit_code == 0 and r.stdout[:-1] == Tokenizer.from_dir(tiny_dir).decode(c["greedy_ids"][:3]), r.output
    shard = next(p for p in snap.iterdir() if p.name.startswith("model-0000"))
    (blobs / Path(os.readlink(shard)).name).unlink()
    with pytest.raises(CheckpointError, match=f"mapped to '{shard.name}', which is a link to a missing file"):
        Checkpoint(snap, notice=None)


def test_index_naming_a_tensor_its_shard_lacks_is_refused(tmp_path, tiny_dir):
    def move(wm):  # point a tensor at the other base shard
        name = "model.layers.0.mlp.up_proj.weight"
        wm[name] = next(f for f in set(wm.values()) if f != wm[name] and "mtp" not in f)

    d = _copy_with_index(tmp_path, tiny_dir, move)
    with pytest.raises(CheckpointError, match="maps 'model.layers.0.mlp.up_proj.weight' to .*, which does not hold it"):
        Checkpoint(d, notice=None)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_invalid_tokenizer_config_is_refused_by_run_and_compile(tmp_path, tiny_dir, text):
    d = tmp_path / "ck"
    shutil.copytree(tiny_dir, d)
    (d / "tokenizer_config.json").chmod(0o644)
    (d / "tokenizer_config.json").write_text(text)
    for args in (["run", str(d), "--prompt", "x", "--max-new", "1"],
                 ["compile", str(d), "--target", "sm_90", "--sku", "h200", "-o", str(tmp_path / "x.ninfer")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "tokenizer_config.json" in r.output and "Traceback" not in r.output, r.output


def test_paths_that_are_not_files_or_directories_are_named_as_such(tmp_path):
    """A symlink loop, a FIFO and a character device are called what they are, by every command that takes a path."""
    import os

    loop = tmp_path / "loop1"
    os.symlink(tmp_path / "loop2", loop)
    os.symlink(loop, tmp_path / "loop2")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, needle in ((loop, "is a symbolic link loop"), (fifo, "is a FIFO, not a file or a directory"),
                         ("/dev/zero", "is a character device, not a file or a directory")):
        for args in (["run", str(path), "--prompt", "x"], ["inspect", str(path)], ["serve", str(path)],
                     ["compile", str(path), "--target", "sm_90", "--sku", "h200", "-o", str(tmp_path / "o.ninfer")],
                     ["bench", str(path)]):
            r = CliRunner().invoke(main, args)
            assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, (args, r.output)
