"""Validate a knowledge-benchmark question file against its documentation set.

Usage:
    python check_questions.py [QUESTIONS_JSONL] [--overlap]

The questions file defaults to ``starlette.questions.jsonl`` next to this
script; the documentation set is the folder of the same name without the
``.questions.jsonl`` suffix.

Each line must be a JSON object with ``id``, ``question``, ``file`` (relative
to the set's folder), ``lines`` (``[first, last]``, 1-based, inclusive) and
``answer_words`` (2-4 strings that occur, case-insensitively, in those lines).

Exits 1, printing one message per problem, when anything is wrong; otherwise
prints how many questions there are and how many distinct files they cover.
With ``--overlap`` it also prints how many content words each question shares
with its expected passage (beyond the answer words), as a paraphrase measure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

MAX_RANGE = 40
MIN_ANSWER_WORDS = 2
MAX_ANSWER_WORDS = 4
FIELDS = ("id", "question", "file", "lines", "answer_words")

_STOP_TEXT = """
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing don down during each else even
every few for from further get gets got had has have having he her here hers him his how i
if in into is it its itself just let like make me more most my myself need no nor not now
of off on once one only or other our out over own same say she should so some still such
than that the their them then there these they this those through to too under until up
use used using very want was way we were what when where which while who whom why will
with without would you your yours instead rather
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    file: str
    first: int
    last: int
    answer_words: tuple[str, ...]


def parse_line(raw: str, lineno: int, problems: list[str]) -> Question | None:
    where = f"line {lineno}"
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        problems.append(f"{where}: not valid JSON ({exc.msg})")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{where}: not a JSON object")
        return None
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        problems.append(f"{where}: missing field(s) {', '.join(missing)}")
        return None
    qid, question, file, lines, words = (obj[f] for f in FIELDS)
    ok = True
    if not isinstance(qid, str) or not qid:
        problems.append(f"{where}: 'id' must be a non-empty string")
        ok = False
    where = f"{where} ({qid})"
    if not isinstance(question, str) or not question.strip():
        problems.append(f"{where}: 'question' must be a non-empty string")
        ok = False
    if not isinstance(file, str) or not file:
        problems.append(f"{where}: 'file' must be a non-empty string")
        ok = False
    if not (
        isinstance(lines, list)
        and len(lines) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in lines)
    ):
        problems.append(f"{where}: 'lines' must be a list of two integers")
        ok = False
    if not (
        isinstance(words, list)
        and MIN_ANSWER_WORDS <= len(words) <= MAX_ANSWER_WORDS
        and all(isinstance(w, str) and w.strip() for w in words)
    ):
        problems.append(
            f"{where}: 'answer_words' must be a list of "
            f"{MIN_ANSWER_WORDS}-{MAX_ANSWER_WORDS} non-empty strings"
        )
        ok = False
    if not ok:
        return None
    return Question(qid, question, file, lines[0], lines[1], tuple(words))


def check_question(q: Question, root: Path, problems: list[str]) -> list[str] | None:
    """Check one question against its file; return the passage lines if valid."""
    where = f"{q.qid}"
    path = (root / q.file).resolve()
    if root.resolve() not in path.parents or not path.is_file():
        problems.append(f"{where}: file {q.file!r} does not exist in {root}")
        return None
    # Split on "\n" only, as an editor numbers lines (str.splitlines also breaks on
    # form feeds and Unicode separators).
    text_lines = path.read_text(encoding="utf-8").split("\n")
    if text_lines[-1] == "":
        text_lines.pop()
    if q.first < 1 or q.last < q.first:
        problems.append(f"{where}: empty or inverted line range {q.first}-{q.last}")
        return None
    if q.last > len(text_lines):
        problems.append(
            f"{where}: line range {q.first}-{q.last} is past the end of "
            f"{q.file} ({len(text_lines)} lines)"
        )
        return None
    size = q.last - q.first + 1
    if size > MAX_RANGE:
        problems.append(f"{where}: line range spans {size} lines (max {MAX_RANGE})")
    passage = text_lines[q.first - 1 : q.last]
    if not any(line.strip() for line in passage):
        problems.append(f"{where}: lines {q.first}-{q.last} are all blank")
    lowered = "\n".join(passage).lower()
    for word in q.answer_words:
        if word.lower() not in lowered:
            problems.append(f"{where}: answer word {word!r} not in {q.file}#L{q.first}-{q.last}")
    return passage


def content_words(text: str) -> set[str]:
    words = set()
    for token in re.findall(r"[a-z0-9]+", text.lower()):
        if token in STOP_WORDS or len(token) < 2:
            continue
        if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        words.add(token)
    return words


def overlap_report(pairs: list[tuple[Question, list[str]]]) -> None:
    ratios: list[float] = []
    disjoint = 0
    for q, passage in pairs:
        excluded = set()
        for word in q.answer_words:
            excluded |= content_words(word)
        asked = content_words(q.question) - excluded
        shared = asked & content_words("\n".join(passage))
        ratio = len(shared) / len(asked) if asked else 0.0
        ratios.append(ratio)
        if not shared:
            disjoint += 1
    if not ratios:
        return
    ratios.sort()
    mean = sum(ratios) / len(ratios)
    median = ratios[len(ratios) // 2]
    print(
        f"overlap: {disjoint} of {len(ratios)} questions share no content word "
        f"with their passage beyond the answer words; shared/question content "
        f"words: mean {mean:.2f}, median {median:.2f}, max {ratios[-1]:.2f}"
    )


@dataclass
class Result:
    count: int = 0
    problems: list[str] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    pairs: list[tuple[Question, list[str]]] = field(default_factory=list)


def check_file(qfile: Path, root: Path) -> Result:
    result = Result()
    seen: set[str] = set()
    for lineno, raw in enumerate(qfile.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            result.problems.append(f"line {lineno}: blank line")
            continue
        result.count += 1
        q = parse_line(raw, lineno, result.problems)
        if q is None:
            continue
        if q.qid in seen:
            result.problems.append(f"line {lineno}: duplicate id {q.qid!r}")
        seen.add(q.qid)
        passage = check_question(q, root, result.problems)
        if passage is not None:
            result.files.add(q.file)
            result.pairs.append((q, passage))
    return result


def docs_root(qfile: Path) -> Path | str:
    """The documentation folder for a questions file, or why there is none."""
    suffix = ".questions.jsonl"
    if not qfile.name.endswith(suffix):
        return f"{qfile} does not end with {suffix}"
    if not qfile.is_file():
        return f"{qfile} does not exist"
    root = qfile.with_name(qfile.name[: -len(suffix)])
    if not root.is_dir():
        return f"documentation folder {root} does not exist"
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Validate a knowledge-benchmark question file.")
    default = Path(__file__).with_name("starlette.questions.jsonl")
    parser.add_argument("questions", nargs="?", type=Path, default=default)
    parser.add_argument(
        "--overlap", action="store_true", help="also report question/passage overlap"
    )
    args = parser.parse_args(argv)
    root = docs_root(args.questions)
    if isinstance(root, str):
        print(f"error: {root}", file=sys.stderr)
        return 1
    result = check_file(args.questions, root)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"{result.count} questions over {len(result.files)} distinct files in {root.name}/")
    if args.overlap:
        overlap_report(result.pairs)
    if result.problems:
        print(f"{len(result.problems)} problem(s) found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
