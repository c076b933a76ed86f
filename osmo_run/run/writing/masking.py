"""Which texts stand for a secret, and how a run masks them.

A secret reaches what a run writes in more forms than its own text: a multi-line value (a
PEM key in ``--env-file``) is quoted by an error whose first line alone is kept, so only
the key's first line is there; a message that quotes a JSON document holds the secret
JSON-escaped (``\\n`` for a newline, ``\\"`` for a quote); the printed line writes control
characters as escapes. :class:`SecretMask` masks each of these forms, longest first.

By ``str.replace``, never a regex: a secret's text is data and no pattern.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from osmo_run.run.writing.text import one_line

MASK = "***"

MIN_LINE_CHARS = 8
"""A line of a multi-line secret this long or longer is masked on its own too; a shorter
line (a PEM's ``==`` tail, a lone brace) says little of the secret, and masking it would
blank that text wherever it appears."""


def secret_forms(secret: str) -> Iterator[str]:
    """The texts that stand for ``secret`` in what a run writes: the secret, its
    JSON-escaped forms (ASCII and not), its :func:`~osmo_run.run.writing.text.one_line` form, and
    the same for each of its lines of :data:`MIN_LINE_CHARS` or more (stripped) when it
    has several, and for the secret stripped of white space at its ends (an error message
    is stripped before it is cut, and a key read from a file often ends in a newline).
    May repeat a form; never yields an empty one."""
    pieces = [secret, secret.strip()]
    lines = secret.splitlines()
    if len(lines) > 1:
        pieces += [line.strip() for line in lines if len(line.strip()) >= MIN_LINE_CHARS]
    for piece in pieces:
        if not piece:
            continue
        yield piece
        yield json.dumps(piece)[1:-1]
        yield json.dumps(piece, ensure_ascii=False)[1:-1]
        yield one_line(piece)


class SecretMask:
    """Replaces every form of each secret (:func:`secret_forms`) by ``***``, longest
    first, so that a form containing another is masked whole."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # a secret of white space alone says nothing, and masking it would blank the text
        forms = {form for secret in secrets if secret.strip() for form in secret_forms(secret)}
        self.forms: tuple[str, ...] = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        """Every text masked, longest first."""
        escaped = {json.dumps(form, ensure_ascii=False)[1:-1] for form in self.forms}
        self._encoded_forms = tuple(sorted(escaped, key=lambda f: (-len(f), f)))
        """Each form as it is written inside a JSON string (``ensure_ascii=False``)."""

    def occurs_in_json(self, encoded: str) -> bool:
        """Whether some form of a secret may be in a string of ``encoded`` (JSON written
        with ``ensure_ascii=False``): ``False`` proves that masking each string of the
        value it encodes changes nothing. JSON escapes a string character by character, so
        a form inside a string is its escaped form inside the encoded text; ``True`` may
        also come from a key, a number or the syntax (a secret ``1``), which only costs
        the caller a value-wise mask it did not need."""
        return any(form in encoded for form in self._encoded_forms)

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __call__(self, text: str) -> str:
        """``text`` with every form of every secret replaced by ``***``."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, MASK)
        return text
