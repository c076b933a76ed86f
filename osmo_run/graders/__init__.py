"""Built-in graders: name one in the spec instead of writing a class.

    grader: osmo_run.graders:NumericMatch
    grader_config:
      settings: {abs_tol: 0.01}

Each is a normal :class:`osmo_run.Grader` whose ``grader_config.settings`` are checked
before any row runs (a bad one stops the run naming the field), and each explains its
reward in the row's ``info.grader`` (what was compared with what). They grade the text of
the final assistant message. All are stdlib-only, so they run wherever the SDK runs,
except ``MathEquivalence`` (``pip install 'osmo-run[math]'``) and ``JsonSchema``
(``pip install 'osmo-run[json]'``), whose libraries are imported only when used.
"""

from osmo_run.graders.combinators import AllOf, AnyOf, WeightedSum
from osmo_run.graders.json_data import JsonEquals, JsonSchema, JsonValid
from osmo_run.graders.judge import ModelJudge
from osmo_run.graders.math_equivalence import MathEquivalence
from osmo_run.graders.numeric import NumericMatch
from osmo_run.graders.text import ExactMatch, Includes, RegexMatch, TokenF1

__all__ = [
    "AllOf",
    "AnyOf",
    "ExactMatch",
    "Includes",
    "JsonEquals",
    "JsonSchema",
    "JsonValid",
    "MathEquivalence",
    "ModelJudge",
    "NumericMatch",
    "RegexMatch",
    "TokenF1",
    "WeightedSum",
]
