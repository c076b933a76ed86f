"""The turns file's writer and its ``--resume`` rule, line by line (no run)."""

from __future__ import annotations

import json
from pathlib import Path

from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.turns import keep_only_recorded, line_rollout_id, turns_line


def _results(path: Path, ids: list[str]) -> Path:
    records = [{"row_id": i, "rollout_id": i, "status": "success"} for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_only_one_line_per_recorded_rollout_survives_and_the_rest_is_streamed_out(
    tmp_path: Path,
) -> None:
    results = _results(tmp_path / "results.jsonl", ["a", "b"])
    turns = tmp_path / "results.turns.jsonl"
    lines = [turns_line(i, [{"completion_token_ids": [n]}]) for n, i in enumerate("abca")]
    turns.write_bytes(("\n".join(lines) + "\n" + '{"rollout_id":"b","tu').encode())
    keep_only_recorded(turns, results)
    assert turns.read_text().splitlines() == [lines[0], lines[1]]  # a, b; not c, a again, torn
    before = turns.stat().st_ino
    keep_only_recorded(turns, results)  # nothing to drop: not rewritten
    assert turns.stat().st_ino == before


def test_lines_are_compact_exact_and_hold_no_non_finite_number() -> None:
    line = turns_line(
        'r\u00e9"1', [{"prompt_token_ids": [1, 2], "logprobs": [-0.1, float("-inf")]}]
    )
    expected = '"turns":[{"prompt_token_ids":[1,2],"logprobs":[-0.1,null]}]}'
    assert line == '{"rollout_id":"r\u00e9\\"1",' + expected
    assert line_rollout_id(line.encode() + b"\n") == 'r\u00e9"1'
    assert line_rollout_id(b'{"row_id":"x"}\n') is None


def test_the_writer_masks_secrets_in_string_values_only_and_creates_the_file_late(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results.jsonl"
    with OutputWriter(results, ("hunter22",), turns=True) as writer:
        assert writer.turns is not None
        assert not writer.turns.path.exists()  # nothing captured yet: no file
        turn = {"messages": [{"role": "user", "content": "pw hunter22"}], "prompt_token_ids": [22]}
        written = writer.turns.write("r1", [turn])
    assert written[0]["messages"][0]["content"] == "pw ***"
    assert turn["messages"][0]["content"] == "pw hunter22"  # the caller's turn untouched
    text = (tmp_path / "results.turns.jsonl").read_text()
    assert "hunter22" not in text and '"prompt_token_ids":[22]' in text
    assert oct((tmp_path / "results.turns.jsonl").stat().st_mode & 0o777) == "0o600"


def test_the_writer_returns_the_turns_as_the_line_holds_them_and_says_where_it_is(
    tmp_path: Path,
) -> None:
    """What ``write`` returns is what its line holds (a served answer sends it, and a
    later read of the same answer reads the line back): a non-finite logprob as ``None``,
    a secret masked; ``last_line`` is the line's offset and length."""
    results = tmp_path / "results.jsonl"
    with OutputWriter(results, ("hunter22",), turns=True) as writer:
        assert writer.turns is not None
        writer.turns.write("r0", [{"prompt_token_ids": [1]}])
        turn = {"messages": [{"content": "pw hunter22"}], "logprobs": [-0.5, float("nan")]}
        written = writer.turns.write("r1", [turn])
        at, length = writer.turns.last_line or (0, 0)
    assert written == [{"messages": [{"content": "pw ***"}], "logprobs": [-0.5, None]}]
    line = (tmp_path / "results.turns.jsonl").read_bytes()[at : at + length]
    assert json.loads(line) == {"rollout_id": "r1", "turns": written}
