"""bench/graph_profile.py's arguments (CPU: refused before torch or a GPU is touched): ``--batch B`` is the decode
step of B sequences, so it must be at least 1 and above 1 only with ``--mode decode``."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import graph_profile  # noqa: E402


@pytest.mark.parametrize("args,needle", [(["--batch", "2", "--mode", "verify"], "--batch 2"),
                                         (["--batch", "0"], "--batch 0")])
def test_batch_refused_naming_the_value(args, needle, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        graph_profile.main([*args, "--json", str(tmp_path / "x.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "--mode decode" in err
    assert not (tmp_path / "x.json").exists()
