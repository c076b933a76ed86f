"""The staging records a run directory holds are followed only to a staging directory of
their own invocation, directly in the temporary directory: a record naming anything
else (edited by hand, or hostile) removes nothing (issue 28, item 20)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor.cleanup import (  # noqa: E402
    STAGING_RECORD,
    record_staging,
    remove_staging,
    staging_prefix,
)


@pytest.fixture
def in_temp() -> Iterator[Path]:
    """A directory of this test's own directly in the temporary directory."""
    with tempfile.TemporaryDirectory(prefix="osmo-test-victim-") as name:
        yield Path(name)


def _record(run_dir: Path, invocation: str, text: str) -> None:
    (run_dir / f"{STAGING_RECORD}{invocation}").write_text(text, encoding="utf-8")


def test_a_records_own_staging_is_removed_and_others_are_kept(tmp_path: Path) -> None:
    mine = Path(tempfile.mkdtemp(prefix=staging_prefix("aaaa1111")))
    live = Path(tempfile.mkdtemp(prefix=staging_prefix("bbbb2222")))
    other_run = Path(tempfile.mkdtemp(prefix=staging_prefix("cccc3333")))
    try:
        (mine / "code").mkdir()
        (mine / "code" / ".env").write_text("KEY=secret\n")
        record_staging(tmp_path, "run-1", "aaaa1111", mine)
        record_staging(tmp_path, "run-1", "bbbb2222", live)
        record_staging(tmp_path, "run-2", "cccc3333", other_run)
        assert remove_staging(tmp_path, "run-1", keep="bbbb2222") == 1
        assert not mine.exists()
        assert live.is_dir() and other_run.is_dir()
        assert not (tmp_path / f"{STAGING_RECORD}aaaa1111").exists()
    finally:
        for path in (mine, live, other_run):
            if path.exists():
                path.rmdir()


@pytest.mark.parametrize(
    "target",
    ["outside", "wrong-prefix", "dotdot", "symlink", "relative", "empty", "garbage"],
)
def test_a_record_naming_anything_else_removes_nothing(
    tmp_path: Path, in_temp: Path, target: str
) -> None:
    victim = in_temp / "precious"
    victim.mkdir()
    (victim / "file").write_text("keep me")
    outside = tmp_path / "outside"
    outside.mkdir()
    link = Path(tempfile.gettempdir()) / f"{staging_prefix('dddd4444')}link"
    named = {
        "outside": str(outside),
        "wrong-prefix": str(in_temp),
        "dotdot": f"{tempfile.gettempdir()}/{staging_prefix('dddd4444')}x/../../{victim}",
        "symlink": str(link),
        "relative": "precious",
        "empty": "",
        "garbage": "\udcff\0",
    }[target]
    if target == "symlink":
        link.symlink_to(victim)
    try:
        _record(tmp_path, "dddd4444", f"run-1\n{named.encode('utf-8', 'surrogateescape')!r}")
        _record(tmp_path, "eeee5555", f"run-1\n{named}" if "\0" not in named else "run-1\n")
        remove_staging(tmp_path, "run-1")
        remove_staging(tmp_path)
    finally:
        if link.is_symlink():
            link.unlink()
    assert (victim / "file").read_text() == "keep me"
    assert outside.is_dir()
    assert not list(tmp_path.glob(f"{STAGING_RECORD}*"))
