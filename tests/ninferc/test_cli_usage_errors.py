"""Click's usage errors (a bad option value, an unknown option or subcommand, a missing option) in every subcommand:
one line on stderr, ``error: ...`` naming the value or option and where the help is, exit status 2 -- the promise of
README's "Every error a user can cause is one line on stderr". Parsing fails before any work, so these are fast."""

import pytest
from click.testing import CliRunner

from ninferc.cli import main


@pytest.mark.parametrize("args, needle", [
    (("plan", "--target", "sm_89", "--sms", "92", "--preset", "qwen3.8-27b", "--draft-tokens", "9"),
     "Invalid value for '--draft-tokens': 9 is not in the range 1<=x<=5. (see 'ninferc plan --help')"),
    (("plan", "--target", "sm_89", "--sms", "0"), "Invalid value for '--sms': 0 is not in the range x>=1."),
    (("plan", "--sms", "3"), "Missing option '--target'. (see 'ninferc plan --help')"),
    (("serve", "x", "--max-context", "1"),  # the option's both names (vLLM's --max-model-len)
     "Invalid value for '--max-context' / '--max-model-len': 1 is not in the range x>=2."),
    (("compile", "x", "--target", "sm_89", "-o", "x.ninfer", "--max-context", "1"), "'--max-context': 1 is not in"),
    (("compile", "x", "--target", "sm_89", "--weights", "w3"), "Invalid value for '--weights': 'w3' is not one of"),
    (("run", "x", "--bogus"), "No such option '--bogus'. (see 'ninferc run --help')"),
    (("serve", "--port", "notaport"), "Invalid value for '--port'"),
    (("bench", "--draft-tokens", "0"), "Invalid value for '--draft-tokens': 0 is not in the range 1<=x<=5."),
    (("run", "--prompt", "x", "--max-new", "-3"), "Invalid value for '--max-new'"),
    (("nope",), "No such command 'nope'. (see 'ninferc --help')"),
])
def test_usage_errors_are_one_line_exit_2(args, needle):
    r = CliRunner().invoke(main, list(args), prog_name="ninferc")
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
    assert "Usage:" not in r.output and "Traceback" not in r.output


def test_help_still_prints_usage():
    """``--help`` is no error: the usage and options, exit status 0."""
    r = CliRunner().invoke(main, ["plan", "--help"], prog_name="ninferc")
    assert r.exit_code == 0 and r.output.startswith("Usage: ninferc plan") and "--draft-tokens" in r.output


def test_compile_help_lists_every_recipe_class():
    """``compile --help`` names the classes ``--recipe`` takes: every quantisable class of ``ir.quant.GROUPS`` (the
    list once lacked ``mtp``, which the recipe accepts)."""
    import re

    from ninferc.ir.quant import GROUPS, NEVER_QUANTISED

    r = CliRunner().invoke(main, ["compile", "--help"], prog_name="ninferc", terminal_width=400)
    assert r.exit_code == 0, r.output
    listed = re.search(r"\(classes: ([a-z_, ]+)\)", " ".join(r.output.split()))
    assert listed, r.output
    assert listed.group(1).split(", ") == [g for g in GROUPS if g not in NEVER_QUANTISED]
