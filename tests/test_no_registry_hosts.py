"""No tracked file names a package registry's host: mirrors are read from the machine's own
configuration (apt sources, pip, npm), so the project works wherever they point.

The hosts are read here the same way, never written down, so this test does not break the
rule it checks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


def _apt_hosts() -> set[str]:
    hosts: set[str] = set()
    sources = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]
    for path in sources:
        if not path.is_file() or not path.name.endswith((".list", ".sources")):
            continue
        for url in re.findall(r"[a-z]+://[^\s\]]+", path.read_text(errors="replace")):
            hosts.add(urlsplit(url).hostname or "")
    return hosts


def _pip_hosts() -> set[str]:
    from pip._internal.models.index import PyPI  # pip's own default index, not a literal

    return {PyPI.netloc, PyPI.file_storage_domain}


def _npm_hosts() -> set[str]:
    npm = shutil.which("npm")
    if npm is None:
        return set()
    run = subprocess.run(
        [npm, "config", "get", "registry"], capture_output=True, text=True, timeout=30
    )
    return {urlsplit(run.stdout.strip()).hostname or ""}


def _tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_package_registry_host() -> None:
    hosts = {h for h in _apt_hosts() | _pip_hosts() | _npm_hosts() if "." in h}
    assert hosts, "found no registry host in this machine's configuration to check against"
    named = []
    for path in _tracked_files():
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        named += [f"{path.relative_to(ROOT)}: {host}" for host in hosts if host in text]
    assert named == [], "read the mirror from the machine's configuration instead"
