"""bench/sass_loop.py's SASS reading (CPU, a fixed nvdisasm listing): blocks split at labels, base opcodes counted
with predicates and modifiers dropped, and only blocks with enough math instructions reported."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sass_loop  # noqa: E402

SASS = """\
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!P4 BRA `(.L_x_90) ;
.L_x_90:
        /*0020*/                   LDG.E.NA.128.CONSTANT R16, desc[UR6][R16.64] ;
        /*0030*/                   FFMA R9, R4, R9, R4 ;
        /*0040*/                   FFMA.RZ R8, R28.reuse, R22.reuse, R25.reuse ;
        /*0050*/                   LOP3.LUT R2, R3, 0xffff0000, RZ, 0xc0, !PT ;
        /*0060*/              @!P0 BRA `(.L_x_90) ;
.L_x_91:
        /*0070*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0080*/               @P1 EXIT ;
"""


def test_blocks_split_at_labels_and_count_base_opcodes():
    blocks = sass_loop.sass_blocks(SASS)
    assert [n for n, _ in blocks] == ["entry", ".L_x_90", ".L_x_91"]
    assert blocks[0][1] == {"MOV": 1, "BRA": 1}
    assert blocks[1][1] == {"LDG": 1, "FFMA": 2, "LOP3": 1, "BRA": 1}  # modifiers and @!P0 dropped
    assert blocks[2][1] == {"HMMA": 1, "EXIT": 1}


def test_hot_blocks_need_enough_math():
    assert [(n, c) for n, c, _ in sass_loop.hot_blocks(SASS, 2)] == [(".L_x_90", 5)]
    assert [n for n, _, _ in sass_loop.hot_blocks(SASS, 1)] == [".L_x_90", ".L_x_91"]
    assert sass_loop.hot_blocks(SASS, 3) == []
