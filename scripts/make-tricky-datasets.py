"""Write datasets/tricky/: the same tricky but valid rows as JSONL, CSV and Parquet.

Issue #15's "done when" set: ids with slashes and ``..``, a 300-character id, a
metadata-only row, a NUL (``\\u0000`` in JSON), CRLF line ends, a 1 MB prompt. Every row's
label is in its prompt (or, for the metadata-only row, in the question its metadata
holds), so a workflow that echoes its prompt and a grader that looks for the label pass
every row: ``tests/cli/test_tricky_datasets.py`` runs all three files that way.

Run from the repository root: ``.venv/bin/python scripts/make-tricky-datasets.py``
(needs pyarrow, the ``parquet`` extra). The output is deterministic.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path(__file__).resolve().parent.parent / "datasets" / "tricky"
BIG = "".join(f"line {i:06d} of a long prompt; " for i in range(40_000))[: 1 << 20]


def rows() -> list[dict[str, Any]]:
    """The rows, each with the columns ``id``, ``prompt``, ``label``, ``metadata`` (a JSON
    string of an object, the one form all three formats hold alike)."""
    plain: list[tuple[str, str, str]] = [
        ("gsm8k/train/17", "What is 17 + 25? 42", "42"),
        ("org/repo#123", "Fix issue #123", "#123"),
        ("../../etc/passwd", "dot-dot: never a path", "never a path"),
        ("..", "just two dots", "two dots"),
        ("a/b\\c d", "slash, backslash and a space", "backslash"),
        ("x" * 300, "a 300-character id", "300"),
        ("nul\x00id", "before\x00after", "after"),
        ('Quoted "id", with comma', 'a "quoted", field\nover two lines', "two lines"),
        ("unicode/ünï/分", "non-ASCII: 分", "分"),
        ("[red]markup[/red]", "an id that looks like rich markup", "markup"),
        ("big", BIG + " needle", "needle"),
    ]
    out = [{"id": i, "prompt": p, "label": lab, "metadata": "{}"} for i, p, lab in plain]
    question = "built from metadata: 6 x 7"
    out.insert(
        5,
        {
            "id": "meta-only",
            "prompt": "",
            "label": "6 x 7",
            "metadata": json.dumps({"question": question}),
        },
    )
    return out


def write_jsonl(path: Path, data: list[dict[str, Any]]) -> None:
    with open(path, "wb") as handle:
        for row in data:
            obj = {k: v for k, v in row.items() if v != "" and v != "{}"}  # meta-only: no prompt
            if "metadata" in obj:
                obj["metadata"] = json.loads(obj["metadata"])
            handle.write(json.dumps(obj).encode() + b"\r\n")  # \u0000 escapes, CRLF ends


def write_csv(path: Path, data: list[dict[str, Any]]) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, ["id", "prompt", "label", "metadata"], lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(data)
    path.write_bytes(text.getvalue().encode("utf-8"))


def write_parquet(path: Path, data: list[dict[str, Any]]) -> None:
    schema = pa.schema([(name, pa.string()) for name in ("id", "prompt", "label", "metadata")])
    table = pa.Table.from_pylist(data, schema=schema)
    pq.write_table(table, path, row_group_size=4)  # several row groups


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    data = rows()
    write_jsonl(OUT / "tricky.jsonl", data)
    write_csv(OUT / "tricky.csv", data)
    write_parquet(OUT / "tricky.parquet", data)
    (OUT / "ids.json").write_text(json.dumps([row["id"] for row in data], indent=1) + "\n")


if __name__ == "__main__":
    main()
