"""Secrets out of a kept trial directory (:mod:`osmo_run.run.writing.scrub`): each file is
rewritten whole or not at all, with its mode kept."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from osmo_run.run.writing.scrub import scrub_directory

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-0123456789abcdef"


def test_each_secret_becomes_stars_and_the_mode_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "agent" / "trial.log"
    log.parent.mkdir()
    log.write_text(f"401: invalid key {SECRET}\nagain {SECRET}\n")
    log.chmod(0o640)
    clean = tmp_path / "result.json"
    clean.write_text('{"reward": 1}')
    assert scrub_directory(tmp_path, (SECRET,)) == []
    assert log.read_text() == "401: invalid key ***\nagain ***\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o640
    assert clean.read_text() == '{"reward": 1}'
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["agent", "result.json", "trial.log"]


# In a process of its own: files it writes may be at most LIMIT bytes (RLIMIT_FSIZE), as
# on a full disk, so rewriting the larger log fails part way through.
_LIMITED = """
import json, resource, signal, sys
from pathlib import Path
from osmo_run.run.writing.scrub import scrub_directory
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
print(json.dumps(scrub_directory(Path(sys.argv[1]), (sys.argv[2],))))
"""


def test_a_write_that_fails_part_way_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    original = (f"{'x' * 80} {SECRET}\n" * 4000).encode()  # 424 KB, 344 KB masked
    log.write_bytes(original)
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(tmp_path), SECRET, "65536"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [warning] = json.loads(done.stdout)
    assert warning.startswith(f"{log}: could not be checked for secrets: "), warning
    assert log.read_bytes() == original  # not truncated at the limit
    assert [p.name for p in tmp_path.iterdir()] == ["trial.log"]  # no temporary file left
