"""The bench JSON's device identity (CPU: a stand-in for CuPy's runtime module)."""

from types import SimpleNamespace

from ninferc.bench import device_identity


def _cp(driver=13000, runtime=13000):
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(
        driverGetVersion=lambda: driver, runtimeGetVersion=lambda: runtime)))


def test_device_identity_names_the_physical_gpu():
    props = {"uuid": bytes(range(16)), "pciDomainID": 0, "pciBusID": 0x1B, "pciDeviceID": 0, "clockRate": 1980000,
             "memoryClockRate": 0}
    out = device_identity(_cp(13000, 12080), props)
    assert out == {"uuid": "000102030405060708090a0b0c0d0e0f", "pci_bus_id": "0000:1b:00", "clock_khz": 1980000,
                   "driver": "13.0", "runtime": "12.8"}  # a zero clock (not reported) is left out


def test_device_identity_leaves_out_what_the_runtime_lacks():
    assert device_identity(SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace())), {"uuid": b""}) == {}


def _repo(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()


def test_git_commit_marks_a_tree_that_differs_from_its_commit(tmp_path, monkeypatch):
    """A stale ``.git`` under a newer tree (the lent device's) must not name its commit as the one measured."""
    import shutil

    import pytest

    from ninferc.bench import git_commit

    if shutil.which("git") is None:
        pytest.skip("no git")
    monkeypatch.delenv("NINFERC_COMMIT", raising=False)
    head = _repo(tmp_path)
    assert git_commit(tmp_path) == head
    (tmp_path / "b.txt").write_text("untracked files do not count\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_commit(tmp_path) == head + "-dirty"
    monkeypatch.setenv("NINFERC_COMMIT", "abc1234")
    assert git_commit(tmp_path) == "abc1234"


def test_git_commit_outside_a_repository_is_unknown(tmp_path, monkeypatch):
    from ninferc.bench import git_commit

    monkeypatch.delenv("NINFERC_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_commit(tmp_path) == "unknown"
