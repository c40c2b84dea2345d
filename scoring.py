"""Scoring for the tangled closed-loop counting dataset: standard library only.

Reads the count a model's reply commits to, scores it, and grades a file of
replies against a dataset folder written by creation.py:

    python scoring.py --evaluate predictions.jsonl                 # dataset in this folder
    python scoring.py --evaluate predictions.jsonl --dataset /data/loops --json
    python scoring.py --evaluate samples.jsonl --dataset /data/loops --report-dir reports/qwen

`python creation.py --evaluate ...` takes the same flags and lands here.
docs/scoring.md describes how a reply is read and the formats --evaluate reads.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import difflib
import io
import itertools
import json
import math
import os
import posixpath
import re
import stat
import sys
from collections import Counter, defaultdict
from pathlib import Path
from statistics import NormalDist
from typing import Iterator, NamedTuple

# ---------------------------------------------------------------------------
# The prompt: every harness puts the same text to the model

# The one line added to the record's question, in every harness (lmms-eval, the VLMEvalKit TSV, the
# dataset card). extract_answer looks for this marker first; --strict reads nothing else.
ANSWER_FORMAT = "Answer with a single integer in the form 'Answer: N'."


# The gist floor: what a small CNN reads off 64-px thumbnails, where no loop can be traced (tests/gist_probe.py,
# trained on one seed and tested on another; the mean over runs). A model must beat it to show it counts.
GIST_FLOOR = {"generator_version": "3.0.0", "thumbnail_px": 64, "exact": 0.145, "within_one": 0.413}


def gist_floor_line() -> str:
    """The sentence the card and the report quote the gist floor in (the README's copy is kept equal by a test)."""
    return (f"a thumbnail CNN reaches {GIST_FLOOR['exact']:.0%} exact ({GIST_FLOOR['within_one']:.0%} within one) "
            f"on {GIST_FLOOR['thumbnail_px']}-px thumbnails of generator {GIST_FLOOR['generator_version']}: "
            "a model must beat it to show counting")


def evaluation_prompt(question: str) -> str:
    """The text shown with each image: the record's question, unchanged, then ANSWER_FORMAT on its own line."""
    return f"{question}\n{ANSWER_FORMAT}"


# ---------------------------------------------------------------------------
# Reading a reply: the count it commits to
#
# extract_answer reads a reply in four steps, each with its own tables below:
# clean the text; find the numbers that can be counts and what role each
# plays; find the final-answer markers; choose a count and check that the
# reply commits to it.

# --- cleaning the reply

# Reasoning models put a draft before "</think>" (Kimi: "◁/think▷"); only what
# follows is the reply. A reply that opens a draft and never closes it was cut short.
_THINK_END = re.compile(r"</think(?:ing)?>|◁/think▷", re.IGNORECASE)
_THINK_START = re.compile(r"<think(?:ing)?>|◁think▷", re.IGNORECASE)
_FULL_WIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")
# LaTeX text wrappers hide connectors: "\boxed{7 \text{ or } 8}" hedges like "7 or 8".
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
# Markup such as Molmo's <points x1="12.5" ...> holds coordinates, not counts (<answer> is a marker).
_MARKUP_TAG = re.compile(r"<(?!/?answer\b)[a-z/][^<>]*>", re.IGNORECASE)
_DATE = re.compile(r"\b[0-9]{1,4}([/.-])[0-9]{1,2}\1[0-9]{1,4}\b")  # "12/05/2024", "2024-05-12"
# A reply that corrects itself ("Wait, let me recount", "on closer inspection",
# "Actually, there are ...", "5 ... no, 7") means what follows the last correction.
_CORRECTION = re.compile(
    r"\b(?:wait|on\s+(?:closer|second)\s+(?:inspection|look|thought)|let\s+me\s+(?:re-?count|re-?check|double[- ]check)"
    r"|re-?counting|(?<!-)correct(?:ion|ing)|I\s+(?:miscounted|was\s+wrong|made\s+a\s+mistake)"
    r"|(?:(?<![A-Za-z] )|(?<=actually )|(?<=actually, ))no(?=[,.!]\s))\b"  # "5 ... no, 7", not "loop no. 3"
    r"|\bactually,?(?=\s+(?:there\s+(?:are|is)|it'?s|it\s+is|I\s+count|the\s+(?:answer|count|total)\s+is))",
    re.IGNORECASE,
)

# --- numbers

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
    "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20,
}
_UNIT_WORDS = "|".join(word for word, value in _NUMBER_WORDS.items() if 1 <= value <= 9)

# A number is a run of ASCII digits (optionally with a decimal part, so that
# "7.5" is seen whole and rejected rather than read as 7; and with thousands
# separators, so that "1,000" is not read as 1) that is not glued to a letter:
# "7th", "2D", "Loop7" and "x7" are not counts. CJK text is fine: "7个"
# parses, because only ASCII letters block a match. Number words are whole
# words; "twenty-one" is one token, not the range "twenty to one".
_NUMBER_PATTERN = (
    r"(?<![A-Za-z0-9_.])(?P<digits>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?)"
    r"(?![A-Za-z0-9_]|\.[0-9])"
    rf"|\b(?P<word>twenty(?:[ -](?:{_UNIT_WORDS}))?|{'|'.join(_NUMBER_WORDS)})\b"
)
_NUMBER_RE = re.compile(_NUMBER_PATTERN, re.IGNORECASE)
_PERCENT_AFTER = re.compile(r"\s*(?:%|percent\b)", re.IGNORECASE)
# "one" is far more often a pronoun than a count ("the small red one",
# "one of the loops", "one by one"); left in, it would often be the last number
# of a reply and turn 7 into 1. "one loop" is always a count.
_COUNT_ONE_AFTER = re.compile(r"[\s*_]+(?:[a-z-]+\s+){0,2}(?:loops?|rings?|curves?)\b", re.IGNORECASE)
_PRONOUN_ONE_AFTER = re.compile(
    r"\s+(?:of|another|by|that|which|who|for|is|was|has|inside|within|more"
    r"|could|would|might|may|can|should|must|will)\b",  # "one could argue": a pronoun
    re.IGNORECASE)
_PRONOUN_ONE_BEFORE = re.compile(  # a determiner and up to three describing words, no verb: not "the answer is one"
    r"\b(?:the|this|that|each|every|which|another|a|an|some|any|no|by)\s+"
    r"(?:(?!(?:is|are|was|were|be|has|shows?|contains?)\b)[a-z0-9-]+,?\s+){0,3}$",
    re.IGNORECASE,
)

# Numbers that are never the count, by what stands around them:
# labels ("Loop 2", "loop #3", "Step 1", "labelled 1-7", a numbered list's
# numbers) and a list of them ("loops 3 and 5", "loops 1, 2 and 3"), "figure-8",
_LABEL_BEFORE = re.compile(
    r"(?:(?<!\bof\s)\b(?:loops?|strands?|curves?|steps?)[ \t]+#?|\b(?:loops?|strands?|curves?)[ \t]*#|\bloop-)$",
    re.IGNORECASE)
_RANGE_LABEL_BEFORE = re.compile(r"\b(?:labell?ed|numbered|marked)[ \t]+$", re.IGNORECASE)
_RANGE_AFTER = re.compile(r"[ \t]*(?:-|–|—|to|through)[ \t]*[0-9]", re.IGNORECASE)
_LABELS_JOINED = re.compile(r"[ \t]*(?:,[ \t]*(?:and[ \t]+)?|and|&|-|–|—|to|through|or)[ \t]*", re.IGNORECASE)
_LIST_ITEM = re.compile(r"^[ \t>*_#-]*(?P<item>[0-9]+)[.)][ \t]+\S", re.MULTILINE)
_FIGURE_BEFORE = re.compile(r"\bfigure[ \t-]?$", re.IGNORECASE)
# numbers the reply sets aside, and a list of them ("missed 1 or 2", "Confidence: 8/10"),
_SET_ASIDE_BEFORE = re.compile(
    r"\b(?:not|rather\s+than|instead\s+of|off\s+by|missed|confidence(?:\s+level)?[\s*_]*[:=]"
    r"|(?:initially|originally|previously|at\s+first)\s+(?:I\s+)?(?:thought|counted|guessed|said|saw|got|estimated)"
    r"|(?:earlier|previous|initial|first|original)\s+(?:count|answer|estimate|guess)\s+(?:of|was)"
    r"|\b[xy][0-9]?[ \t]*[=:])"  # coordinates
    r"[\s*_:]*$",
    re.IGNORECASE,
)
_SET_ASIDE_JOINED = re.compile(r"[ \t]*(?:or|/|to|-|–)[ \t]*", re.IGNORECASE)
# the parts of a sum ("4 + 3 = 7" keeps the 7; "6 + 1 hidden" keeps nothing; a
# sum's parts sit within a few words of its result, so the search for one stops there),
_SUM_PART_AFTER = re.compile(r"[^\n=+→]{0,20}?\+[ \t]*[0-9a-z(]", re.IGNORECASE)
_SUM_PART_BEFORE = re.compile(r"\+[^\n=+→]{0,20}$")
_SUM_RESULT = re.compile(r"=|→|->")
_SUM_REACH = 80
_ADDEND_AFTER = re.compile(r"[ \t]*\+[ \t]*[0-9]")
_ADDEND_BEFORE = re.compile(r"[0-9][ \t]*\+[ \t]*$")
# and sizes, shapes and ratios ("an 8-shaped one", "three-way", "512 × 512", "green ×3", "4 out of 5").
_COMPOUND_AFTER = re.compile(r"-(?!loops?\b)[a-z]", re.IGNORECASE)
_DIMENSION_AFTER = re.compile(r"[ \t]*[×x][ \t]*[0-9]")
_DIMENSION_BEFORE = re.compile(r"(?:[0-9][ \t]*[×x]|×)[ \t]*$")
_RATIO_AFTER = re.compile(r"[ \t]+out[ \t]+of[ \t]+[0-9]", re.IGNORECASE)
_RATIO_BEFORE = re.compile(r"[0-9][ \t]+out[ \t]+of[ \t]+$", re.IGNORECASE)
# and the parts of a power ("2^3", "2³"): the reply gives an expression, not a count.
_POWER_AFTER = re.compile(r"[ \t]*\^|[⁰¹²³⁴⁵⁶⁷⁸⁹]")
_POWER_BEFORE = re.compile(r"\^[ \t]*$")

# "loops" and up to three words before it: "distinct closed loops" after a count.
_LOOP_NOUN = r"(?:[a-z-]+[ \t]+){0,3}loops?"

# The role of a number that can be the count. A count of loops: "7 loops",
# "7 distinct closed loops" (not "12 crossings between the loops").
_LOOPS_AFTER = re.compile(
    r"[ \t*_]+(?:(?!(?:of|between|in|on|at|from|with|across|among|per|for|by|and|or|are|is|were|was)\b)[a-z-]+[ \t]+){0,3}"
    r"(?:loops?|rings?|curves?)\b",
    re.IGNORECASE,
)
# A detail: a number naming something other than the loops counted ("2 of
# them", "3 red", "4 are large", "12 crossings", "one for each") ...
_OTHER_THING_AFTER = re.compile(
    r"[ \t*_]*(?:[a-z-]+[ \t]+){0,2}?"
    r"(?:of(?![ \t]+(?:them|these|those)[ \t*_]*(?:[.!?\n]|$))|for|each|apiece|times"
    r"|crossings?|intersections?|junctions?|points?|places?|regions?|areas?|faces?|parts?|pieces?|segments?"
    r"|overlaps?|layers?|degrees?|pixels?|px|colou?rs?|clusters?|groups?|others?"
    r"|large|larger|small|smaller|big|bigger|tiny|medium|outer|inner"
    r"|red|blue|green|yellow|orange|purple|pink|black|white|brown|gr[ae]y|teal|cyan|magenta|gold)\b",
    re.IGNORECASE,
)
# ... particular ones ("the two curves there", "the 3 loops on the left"; but "out of the 7 loops" asserts),
_DEFINITE_BEFORE = re.compile(r"\bthe[ \t]+[*_]*$", re.IGNORECASE)
# ... what a tally of something else comes to ("Crossings: 12", "the number of crossings is 14"),
_OTHER_TALLY_BEFORE = re.compile(
    r"\b(?:crossings?|intersections?|junctions?|points?|regions?|overlaps?)\b[^.\n]{0,20}?(?:\bis|\bare|\bwas|[:=])"
    r"[\s*_]*$",
    re.IGNORECASE,
)
# ... a number in brackets or in a table row ("7 loops (4 large, 3 small)"),
# ... or a conditional one ("8 if you count the frame", "if the knot is two loops").
_IF_AFTER = re.compile(r"[ \t*_]*(?:[a-z]+[ \t]+){0,2}if\b", re.IGNORECASE)
_IF_BEFORE = re.compile(r"\bif\b[^.!?;,\n]*$", re.IGNORECASE)
# A claim: a count stated as a total ("7 in total", "making 7", "= 7", "7 loops:
# 2 red, ...") or asserted ("There are 7", "I count 7", "the image contains 7",
# and a commitment such as "I'll go with 7" or "I'd say 7"), as against one that
# describes ("2 loops are nested", "3 are visible").
_TOTAL_AFTER = re.compile(
    rf"[ \t*_]*(?:{_LOOP_NOUN}[ \t*_]+)?(?:in[ \t]+total|in[ \t]+all|altogether|overall|total)\b"
    rf"|[ \t*_]*{_LOOP_NOUN}[ \t*_]*:",
    re.IGNORECASE)
_TOTAL_BEFORE = re.compile(
    r"(?:\b(?:making|makes|giving|gives|so|totals?|totall?ing|equals?|i\.e\.|that\s+is|that'?s)|=|→|->)[ \t*_:,]*$",
    re.IGNORECASE)
_ASSERTED_BEFORE = re.compile(
    r"(?:\bthere\s+(?:are|is|were)|\bthere're|\bI\s+(?:can\s+)?(?:count(?:ed)?|see|saw|find|found|identif(?:y|ied)"
    r"|detect(?:ed)?|observed?|traced?)|\b(?:contains?|shows?|depicts?|out\s+of\s+the)"
    r"|\bI(?:['’](?:ll|d)|\s+(?:will|would))\s+(?:go\s+with|say|settle\s+on|stick\s+with)"
    r"|\bI(?:['’]m|\s+am)\s+going\s+with"
    r"|\b(?:image|picture|tangle|drawing)\s+(?:has|holds))"
    r"[ \t]+(?:(?:exactly|only|just|about|approximately|roughly|around|precisely|a\s+total\s+of)[ \t]+)?[*_]*$",
    re.IGNORECASE)
_BEFORE_CHARS = 40  # how far back the tables above look


class _Number(NamedTuple):
    start: int
    end: int
    value: float  # float so that "7.5" and "-3" survive until they are judged
    names_other_thing: bool  # "2 of them", "3 red": a detail
    bracketed: bool  # in brackets or a table row: a detail
    conditional: bool  # "8 if ...": a detail, and no marker's answer
    total: bool  # stated as a total
    asserted: bool  # asserted rather than described

    @property
    def primary(self) -> bool:
        """Not a detail: the count, unless the reply holds nothing else."""
        return not (self.names_other_thing or self.bracketed or self.conditional)

    @property
    def claimed(self) -> bool:
        return self.primary and (self.total or self.asserted)


def _is_pronoun_one(text, m, before):
    """Whether the "one" matched by m stands for a thing rather than a count."""
    if _COUNT_ONE_AFTER.match(text, m.end()):
        return False
    return bool(_PRONOUN_ONE_AFTER.match(text, m.end()) or _PRONOUN_ONE_BEFORE.search(before))


def _is_sum_part(text, m, before):
    reach = text.find("\n", m.end(), m.end() + _SUM_REACH)
    has_result = _SUM_RESULT.search(text, m.end(), reach if reach >= 0 else m.end() + _SUM_REACH)
    return bool((has_result and (_SUM_PART_AFTER.match(text, m.end()) or _SUM_PART_BEFORE.search(before)))
                or _ADDEND_AFTER.match(text, m.end()) or _ADDEND_BEFORE.search(before))


def _exclusion(text, m, before, list_items):
    """Why the number m is never the count ("label", "figure", "aside", "sum" or "size"), or None."""
    if m.start() in list_items or _LABEL_BEFORE.search(before) or (
            _RANGE_LABEL_BEFORE.search(before) and _RANGE_AFTER.match(text, m.end())):
        return "label"
    if _FIGURE_BEFORE.search(before):
        return "figure"
    if _SET_ASIDE_BEFORE.search(before):
        return "aside"
    if _is_sum_part(text, m, before) or _POWER_AFTER.match(text, m.end()) or _POWER_BEFORE.search(before):
        return "sum"
    if (_COMPOUND_AFTER.match(text, m.end()) or _DIMENSION_AFTER.match(text, m.end()) or _DIMENSION_BEFORE.search(before)
            or _RATIO_AFTER.match(text, m.end()) or _RATIO_BEFORE.search(before)):
        return "size"
    return None


def _bracket_spans(text):
    """(start, end) of every stretch of text inside round brackets. A bracket left open closes at
    the end of its sentence or line, and a smiley's ":(" opens none."""
    spans, depth, opened = [], 0, 0
    for m in re.finditer(r"(?<![:;])\(|\)|\n|[.!?](?=\s)", text):
        if m.group() == "(":
            opened = m.start() if depth == 0 else opened
            depth += 1
        elif depth and (m.group() != ")" or depth == 1):
            spans.append((opened, m.start()))
            depth = 0
        elif depth:
            depth -= 1
    if depth:
        spans.append((opened, len(text)))
    return spans


def _find_numbers(text):
    """The numbers of text that can be the count, in order, each with its role."""
    items = [m.start("item") for m in _LIST_ITEM.finditer(text)]
    list_items = set(items) if len(items) >= 2 else set()  # one "7. The loops ..." line is an answer, not a list
    spans = _bracket_spans(text)
    span_starts = [start for start, _ in spans]
    newlines = [-1] + [m.start() for m in re.finditer("\n", text)]
    numbers, excluded = [], None  # excluded: (kind, end) of the number just before, if it was a label or set aside
    for m in _NUMBER_RE.finditer(text):
        before = text[max(0, m.start() - _BEFORE_CHARS):m.start()]
        total_after = bool(_TOTAL_AFTER.match(text, m.end()))
        counts_loops = total_after or bool(_LOOPS_AFTER.match(text, m.end()))
        if excluded and not counts_loops and (
                _LABELS_JOINED if excluded[0] == "label" else _SET_ASIDE_JOINED).fullmatch(text, excluded[1], m.start()):
            kind = excluded[0]  # "loops 1, 2 and 3", "missed 1 or 2"
        else:
            kind = _exclusion(text, m, before, list_items)
        excluded = (kind, m.end()) if kind in ("label", "aside") else None
        if kind is not None or _PERCENT_AFTER.match(text, m.end()):
            continue
        if m.group("digits"):
            digits = m.group("digits").replace(",", "")
            # Whole numbers read exactly (a float rounds a 24-digit one); from 309 digits a float gives inf,
            # which _committed_value turns down.
            value = int(digits) if "." not in digits and len(digits) <= 308 else float(digits)
            # A minus glued to the digits and not to a word before it is a sign;
            # in "7-8" or "Loop-7" it is a dash.
            sign_at = m.start() - 1
            if sign_at >= 0 and text[sign_at] in "-−" and (sign_at == 0 or not text[sign_at - 1].isalnum()):
                value = -value
        else:
            word = m.group("word").lower()
            if word == "one" and _is_pronoun_one(text, m, before):
                continue
            head, _, unit = word.replace("-", " ").partition(" ")
            value = float(_NUMBER_WORDS[head] + _NUMBER_WORDS.get(unit, 0))
        asserted = bool(_ASSERTED_BEFORE.search(before))
        other_thing = (not counts_loops and bool(_OTHER_THING_AFTER.match(text, m.end()) or _OTHER_TALLY_BEFORE.search(before))
                       or (not asserted and bool(_DEFINITE_BEFORE.search(before))))
        span = bisect.bisect_right(span_starts, m.start()) - 1
        line_start = newlines[bisect.bisect_left(newlines, m.start()) - 1] + 1
        bracketed = (span >= 0 and m.start() < spans[span][1]) or text.startswith("|", line_start)
        total = total_after or bool(_TOTAL_BEFORE.search(before[-20:]))
        conditional = bool(_IF_AFTER.match(text, m.end()) or _IF_BEFORE.search(before))
        numbers.append(_Number(m.start(), m.end(), value, other_thing, bracketed, conditional, total, asserted))
    return numbers


# --- final-answer markers

# The keyword form accepts "Answer: 7", "answer is 7", "**Answer:** 7", "Final
# answer = 7", '"answer": 7' in JSON; plain "answer" with no ":", "=" or verb
# ("to answer this, I ...") is not a marker.
_KEYWORD_MARKER = re.compile(
    r"\banswer\b[\s*_\"']*(?:(?:is|would\s+be|will\s+be|should\s+be)\b[\s*_]*:?|[:=])",
    re.IGNORECASE,
)
# A tally stated as such marks the count too, if a count follows on the same
# line: "Total: 7", "the total is 7", "a total of 7", "Final count: 7",
# "Number of loops: 7", "Loops: 7" or "Count: 7" opening a line, '"count": 7'
# in JSON. "a total of 14 crossings" names no count and marks nothing.
_TALLY_MARKER = re.compile(
    r"(?:^[ \t>*_#-]*|\b(?:the|a|my|grand|loops?)[ \t]+|[\"'])total\b[\s*_\"']*(?:(?:is|of)\b|[:=])"
    r"|\b(?:final|total|loop)\s+count\b[\s*_]*(?:is\b|[:=])"
    r"|\bnumber[\s_]+of[\s_]+(?:(?:distinct|closed|separate|individual|unique|tangled)[\s_]+){0,2}loops\b[\s*_]*"
    r"(?:is\b|[:=])"
    r"|[\"'](?:count|num_loops|loops|total)[\"']\s*:(?=\s*[\"']?[0-9])"
    r"|^[ \t>*_#-]*(?:(?:total|loop|final)\s+)?(?:loops|count)[\s*_]*:",
    re.IGNORECASE | re.MULTILINE,
)
_BOXED_MARKER = re.compile(r"\\boxed\s*\{")
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
# A bold number closing the reply ("... so the total is **7**."), and only a
# number: "**Loop 3**" at the end is a label, not a verdict.
_TRAILING_BOLD = re.compile(
    rf"(?:\*\*|__)\s*(?P<clause>(?:{_NUMBER_PATTERN})[^*_\n]{{0,40}}?)(?:\*\*|__)\W*$",
    re.IGNORECASE,
)
# After a keyword marker the answer is in the same sentence or line; the next
# sentence is explanation ("Answer: 7. Loop 1 starts ..."). A tally's count is on its own line.
_CLAUSE_LEAD = re.compile(r"[\s*_#>`]*")
_SAME_LINE_LEAD = re.compile(r"[ \t*_#>`]*")
_CLAUSE_END = re.compile(r"\n|(?<!\bi\.e)(?<!\be\.g)[.!?;](?=\s|$)")  # "i.e. 7" goes on


def _closing_braces(text):
    """For each "{" in text, by position, the position of the "}" that closes it (absent if none)."""
    closing, opened = {}, []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            opened.append(m.start())
        elif opened:
            closing[opened.pop()] = m.start()
    return closing


def _marker_clauses(text):
    """(marker start, clause start, clause end, is_tally) for every final-answer marker, in text order.

    Sentence ends and braces are found once for the whole text, so a reply
    repeating a marker thousands of times is still read in linear time.
    """
    clauses = []
    clause_ends = [m.start() for m in _CLAUSE_END.finditer(text)] + [len(text)]
    for marker, lead, tally in ((_KEYWORD_MARKER, _CLAUSE_LEAD, False), (_TALLY_MARKER, _SAME_LINE_LEAD, True)):
        for m in marker.finditer(text):
            start = lead.match(text, m.end()).end()
            clauses.append((m.start(), start, clause_ends[bisect.bisect_left(clause_ends, start)], tally))
    closing = _closing_braces(text)
    for m in _BOXED_MARKER.finditer(text):
        clauses.append((m.start(), m.end(), closing.get(m.end() - 1, len(text)), False))
    for m in _ANSWER_TAG.finditer(text):
        clauses.append((m.start(), m.start(1), m.end(1), False))
    for m in _TRAILING_BOLD.finditer(text):  # a tally too: "the number of crossings is **12**." marks nothing
        clauses.append((m.start(), m.start("clause"), m.end("clause"), True))
    return sorted(clauses)


# --- choosing the count and checking the reply commits to it

def _first_in_clause(numbers, indices):
    """The count a marker's clause gives: the first primary number stated as a total, or failing
    that asserted, or failing that the first primary one; then the first naming no other thing; then the first."""
    for good in (lambda n: n.primary and n.total, lambda n: n.primary and n.asserted, lambda n: n.primary,
                 lambda n: not n.names_other_thing):
        found = next((i for i in indices if good(numbers[i])), None)
        if found is not None:
            return found
    return indices[0]


def _last_in_reply(numbers, indices):
    """The count an unmarked reply gives: its last claimed number, or failing that its last primary
    one; then the last naming no other thing; then the last."""
    for good in (lambda n: n.claimed, lambda n: n.primary, lambda n: not n.names_other_thing):
        found = next((i for i in reversed(indices) if good(numbers[i])), None)
        if found is not None:
            return found
    return indices[-1]


# Gaps between two different numbers that make a reply name two candidates:
# "7 or 8", "7-8", "7 to 8", "7/8", "7 ± 1", "7, give or take 1", "7 (or possibly 8)",
# "**7** or **8**", "7 loops or 8", "7 oder 8", "7? Or is it 8?", "7... or is it 8?".
_AFTER_FIRST_COUNT = rf"(?:[ \t*_]+{_LOOP_NOUN})?(?:\.\.\.?|…)?[ \t*_()$,?]*"  # "7 loops, ", "7 (", "**7** ", "7? "
_ALTERNATIVE_GAP = re.compile(
    _AFTER_FIRST_COUNT +
    r"(?:(?:[—–-][ \t]*)?or(?:\s+(?:is|was)\s+it\b)?|to|-|–|—|~|/|±|\+/-|give\s+or\s+take|o|ou|oder|或|到|至)"
    r"[ \t*_()$]*"
    r"(?:(?:maybe|possibly|perhaps|probably)\s*)?",
    re.IGNORECASE,
)
# Counts listed with commas ("7, 8, or 9"): the list names candidates if its last gap is an alternative.
_LIST_GAP = re.compile(r"[ \t*_]*,[ \t*_]*")
# Softer second candidates hedge only when the second number ends the thought
# ("7 (possibly 2 are hidden)" does not): right after the first count, "7, possibly 8",
# "7 loops (maybe 8)", "7, though it could be 8", ...
_MAYBE_GAP = re.compile(
    _AFTER_FIRST_COUNT + r"(?:(?:but|though|although|or)\s+)?"
    r"(?:maybe|possibly|perhaps|(?:it\s+)?(?:could|might)\s+(?:also\s+)?be)[ \t*_()$]*",
    re.IGNORECASE,
)
# ... or opening a later clause, whatever stands between: "7 loops, although I'm not sure —
# maybe 8", "10 loops. However, ..., so it could be 11", "there may be 8", "one could argue for 7".
# A modal needs "it", "there" or "that" (or a sentence start) before it: in "Loop 3 might be 2 loops"
# a part is hedged.
_LATER_HEDGE = re.compile(
    r"(?:(?:[,;:.!?(—–]|\s-|\b(?:so|but|or|though|although|and))[\s*_]*(?:maybe|possibly|perhaps)"
    r"|(?:\b(?:it|there|that)|[.!?;:—–]|\s-)[\s*_]*(?:could|might|may)\s+(?:also\s+|well\s+)?be"
    r"|\b(?:one|some(?:one|body)?|others|you|we|people)\s+(?:could|might|may|would)\s+(?:also\s+|well\s+)?"
    r"(?:argue|say|claim|count)(?:\s+(?:for|that\s+there\s+are))?)[ \t*_()$]*\Z",
    re.IGNORECASE,
)
_HEDGE_CHARS = 40  # how far back from a later count _LATER_HEDGE looks
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")  # a note after a blank line is a caveat ("Answer: 7\n\nNote: ...")
_ENDS_AFTER = re.compile(rf"[ \t*_]*(?:{_LOOP_NOUN}[ \t*_]*)?(?:[)\].,;:!?\n]|$)", re.IGNORECASE)
_AND_GAP = re.compile(r"[\s*_]*and[\s*_]*", re.IGNORECASE)
_BETWEEN_BEFORE = re.compile(r"\bbetween[\s*_]*$", re.IGNORECASE)
# Two counts of loops joined by "and", the second ending the thought, are the parts of a
# total the reply never states: "5 large loops and 2 small loops" (not "7 loops and 2 loops overlap").
_BREAKDOWN_GAP = re.compile(rf"[ \t*_]+{_LOOP_NOUN}[ \t*_]*,?[ \t]*and[ \t*_]+", re.IGNORECASE)
_LOOPS_END_AFTER = re.compile(rf"[ \t*_]+{_LOOP_NOUN}[ \t*_]*(?:[)\].,;:!?\n]|$)", re.IGNORECASE)
# A bound is not a count: "at least 7", "more than 6", "there are >6", "7+", "7 loops or more",
# "7, possibly more".
# Only a free-standing "<"/">" is one: not a tag ("<answer>7"), an arrow
# ("-> 7") or a markdown quote ("> 7" opening a line).
_BOUND_BEFORE = re.compile(
    r"(?:\bat\s+least|\bat\s+most|\bmore\s+than|\bless\s+than|\bfewer\s+than|(?<=[ \t:(])[<>]=?|[≤≥])[\s*_]*$",
    re.IGNORECASE,
)
_BOUND_AFTER = re.compile(
    r"[\s*_]*\+(?!\s*[0-9])"
    rf"|(?:[ \t*_]+{_LOOP_NOUN})?[\s*_,]*(?:or\s+(?:more|fewer|less|greater|higher|above)"
    r"|(?:possibly|maybe|perhaps)\s+more\b)",
    re.IGNORECASE,
)


def _two_candidates(a, b):
    """Whether a and b can be two different answers: "7 (seven)" or "7/7" names one number twice,
    and "7 loops - 3 big" names a part."""
    return a.value != b.value and not a.names_other_thing and not b.names_other_thing


def _hedges_later_count(text, a, b):
    """Whether b, a count after a, is a second candidate that a hedge opening a later clause
    names ("10 loops. However, ..., so it could be 11")."""
    if not _two_candidates(a, b):
        return False
    hedge = _LATER_HEDGE.search(text, max(a.end, b.start - _HEDGE_CHARS), b.start)
    return bool(hedge and _ENDS_AFTER.match(text, b.end))


def _list_around(text, numbers, i):
    """The first and last position of the comma list of numbers that numbers[i] stands in ("7, 8, or 9")."""
    first = last = i
    while first > 0 and _LIST_GAP.fullmatch(text, numbers[first - 1].end, numbers[first].start):
        first -= 1
    while last + 1 < len(numbers) and _LIST_GAP.fullmatch(text, numbers[last].end, numbers[last + 1].start):
        last += 1
    return first, last


def _committed_value(text, numbers, i):
    """The count that `numbers[i]` commits to, or None when it is hedged, a bound or not a count."""
    chosen = numbers[i]
    if not math.isfinite(chosen.value) or chosen.value < 0 or chosen.value != int(chosen.value):
        return None  # a digit run of 309 or more (a model stuck repeating) is no count either
    if _BOUND_BEFORE.search(text[max(0, chosen.start - 30):chosen.start]) or _BOUND_AFTER.match(text, chosen.end):
        return None
    first, last = _list_around(text, numbers, i)
    for left, right in ((first - 1, first), (last, last + 1)):
        if left < 0 or right >= len(numbers):
            continue
        a, b = numbers[left], numbers[right]
        if not _two_candidates(a, b):
            continue
        gap = text[a.end:b.start]
        if _ALTERNATIVE_GAP.fullmatch(gap) or (_MAYBE_GAP.fullmatch(gap) and _ENDS_AFTER.match(text, b.end)):
            return None
        if _BREAKDOWN_GAP.fullmatch(gap) and _LOOPS_END_AFTER.match(text, b.end):
            return None
        if _AND_GAP.fullmatch(gap) and _BETWEEN_BEFORE.search(text[max(0, a.start - 20):a.start]):
            return None
    # Within the chosen count's paragraph: a count naming a second candidate after it, or the one before it
    # when the chosen count is itself that candidate ("10 loops. However, ..., so it could be 11").
    breaks = [m.start() for m in _PARAGRAPH_BREAK.finditer(text)]
    after = bisect.bisect_left(breaks, chosen.end)
    paragraph_start = breaks[after - 1] if after else -1
    paragraph_end = breaks[after] if after < len(breaks) else len(text)
    same_paragraph = itertools.takewhile(lambda b: b.start < paragraph_end, numbers[i + 1:])
    if (i and numbers[i - 1].end > paragraph_start and _hedges_later_count(text, numbers[i - 1], chosen)
            or any(_hedges_later_count(text, chosen, b) for b in same_paragraph)):
        return None
    if chosen.conditional and any(n.conditional and n.value != chosen.value for n in numbers):
        return None  # "4 loops if ..., or 5 if ...": alternatives
    return int(chosen.value)


def _read_count(text, numbers, clauses, begin):
    """The count text commits to from position begin on (see extract_answer), and what gave it:
    "marker", "claim" (a claimed count), "primary" (another primary count) or "" (no such count there)."""
    first = bisect.bisect_left([number.start for number in numbers], begin)
    pools = {False: [i for i in range(first, len(numbers)) if not numbers[i].conditional]}
    pools[True] = [i for i in pools[False] if numbers[i].primary]  # a tally marks only a primary count: not "14 crossings"
    pool_starts = {tally: [numbers[i].start for i in pool] for tally, pool in pools.items()}
    last_claim = max((numbers[i].start for i in pools[True] if numbers[i].claimed), default=-1)
    for marker_start, start, end, tally in reversed(clauses):
        if marker_start < begin:
            break
        if tally and last_claim > end:
            continue  # a running total ("so the total is 5") gives way to a later "That gives 7 loops"
        window = slice(bisect.bisect_left(pool_starts[tally], start), bisect.bisect_left(pool_starts[tally], end))
        inside = [i for i in pools[tally][window] if numbers[i].end <= end]
        if inside:
            chosen = _first_in_clause(numbers, inside)
            first, last = _list_around(text, numbers, chosen)
            if any(_two_candidates(numbers[chosen], numbers[k]) for k in range(first, last + 1)):
                return None, "marker"  # "Answer: 7, 8, 9": several counts given as the answer
            return _committed_value(text, numbers, chosen), "marker"
    if first == len(numbers):
        return None, ""
    chosen = _last_in_reply(numbers, range(first, len(numbers)))
    source = "claim" if numbers[chosen].claimed else "primary" if numbers[chosen].primary else ""
    return _committed_value(text, numbers, chosen), source


def _marked_before(text, end):
    """The count the last final-answer marker before position end commits to, or None."""
    head = text[:end]
    value, source = _read_count(head, _find_numbers(head), _marker_clauses(head), 0)
    return value if source == "marker" else None


def _final_reply(response: str) -> "str | None":
    """The reply after its reasoning draft, full-width digits made ASCII; None for a draft never closed."""
    reply = _THINK_END.split(response)[-1]
    if _THINK_START.match(reply.lstrip()):
        return None
    return reply.translate(_FULL_WIDTH_DIGITS)


def extract_answer(response: str) -> "int | None":
    """The non-negative integer a model's reply commits to, or None.

    The last final-answer marker holding a count wins ("Answer: 7", "\\boxed{7}",
    "Total: 7"); failing one, the last count the reply claims ("there are 7").
    Labels, parts, sizes and numbers set aside are never the count, and a
    hedged count ("7 or 8", "at least 7") gives None. docs/scoring.md has the
    rules in full.

    >>> extract_answer("There are 5 ... no, 7 loops.")
    7
    >>> extract_answer("There are 7 loops: 3 large ones and 4 small ones.")
    7
    >>> extract_answer("**Answer:** 7. I traced each loop: 1 2 3")
    7
    >>> extract_answer("The image contains eleven distinct closed loops.")
    11
    >>> extract_answer("The answer is 7 or 8.") is None
    True
    """
    reply = _final_reply(response)
    if reply is None:
        return None
    text = _DATE.sub(" ", _MARKUP_TAG.sub(" ", _LATEX_TEXT.sub(r"\1", reply)))
    numbers, clauses = _find_numbers(text), _marker_clauses(text)
    corrections = list(_CORRECTION.finditer(text))
    if corrections:
        correction = corrections[-1]
        value, source = _read_count(text, numbers, clauses, correction.end())
        if source:
            # A bare "no" after a final answer takes it back without giving another ("Final answer: 7.
            # Actually no, 8."): two answers. A correction that claims or marks its count replaces it.
            if (correction.group().lower() == "no" and source == "primary" and clauses
                    and clauses[0][0] < correction.start()  # a marker before it: read what it gave
                    and _marked_before(text, correction.start()) not in (None, value)):
                return None
            return value
    return _read_count(text, numbers, clauses, 0)[0]


# The strict reading: "Answer: N" as ANSWER_FORMAT asks, ending its line (any case; markdown emphasis
# and a closing full stop allowed), N digits, with thousands separators or not. At most 18 digits:
# a longer run is no count, and int() of thousands of digits fails.
_ANSWER_LINE = re.compile(
    r"\banswer[ \t*_]*:[ \t*_]*(?P<n>[0-9]{1,3}(?:,[0-9]{3}){1,5}|[0-9]{1,18})[ \t*_]*\.?[ \t]*$",
    re.IGNORECASE | re.MULTILINE)


def extract_answer_line(response: str) -> "int | None":
    """The strict reading: the count of the reply's last "Answer: N" that ends its line, or None.

    Only the line the prompt asks for counts, so every harness grades alike; a reply that states its
    count any other way reads as unparsable.

    >>> extract_answer_line("I count 7 loops.\nAnswer: 7")
    7
    >>> extract_answer_line("I count 7 loops.") is None
    True
    """
    reply = _final_reply(response)
    found = _ANSWER_LINE.findall(reply) if reply is not None else []
    return int(found[-1].replace(",", "")) if found else None


def score_answer(response: str, answer: int) -> float:
    """1.0 when the reply commits to exactly `answer` (see extract_answer), else 0.0.

    >>> score_answer("I count ten loops.", 10)
    1.0
    >>> score_answer("Answer: 10", 1)
    0.0
    """
    return 1.0 if extract_answer(response) == answer else 0.0



# ---------------------------------------------------------------------------
# Reading the dataset and the predictions

ANNOTATIONS_FILE = "annotations.jsonl"
DATA_FILE = "data.json"
EXPORT_MARKER_FILE = "tangled_loops_export.json"  # written by export.py beside an export's annotations.jsonl
IDENTITY_FIELDS = ("pixel_sha256", "seed", "answer")  # a prediction may carry these to tie it to its image
REPLY_TAIL_CHARS = 200  # per_item.jsonl keeps a reply's end, where its answer usually stands
SHOWN_CHARS = 60  # a value quoted in an error message is cut to this


class EvaluationError(ValueError):
    """Bad input to --evaluate; the message names the file and the line."""


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _parse_json(text: str):
    """json.loads, with every way it fails (bad syntax, deep nesting, an int past Python's digit limit)
    as a ValueError whose message fits on one line."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(_json_failure(error)) from None


def _json_failure(error: Exception) -> str:
    if isinstance(error, RecursionError):
        return "nested too deeply"
    if isinstance(error, json.JSONDecodeError):
        return error.msg
    return str(error).split(";")[0]  # "Exceeds the limit (4300 digits) for integer string conversion"


# A spreadsheet's first bytes: .xlsx is a ZIP archive, .xls an OLE2 compound file.
SPREADSHEET_MAGIC = (b"PK\x03\x04", b"\xd0\xcf\x11\xe0")
SPREADSHEET_ADVICE = ("a spreadsheet (VLMEvalKit writes .xlsx unless told otherwise): run VLMEvalKit with "
                      "PRED_FORMAT=tsv, or save the sheet as .tsv or .csv, and grade that")


def _read_bytes(path: Path) -> bytes:
    """The file's bytes. A device (/dev/zero never ends) is refused, and so is a named pipe with nothing
    writing to it, which a plain read would wait on forever; a pipe being written (<(...)) is read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except IsADirectoryError:  # Windows cannot open a folder at all
        raise EvaluationError(f"{path} is a folder, not a file") from None
    mode = os.fstat(fd).st_mode  # before fdopen, which refuses a folder naming only the descriptor
    if stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        os.close(fd)
        raise EvaluationError(f"{path} is a {'folder' if stat.S_ISDIR(mode) else 'device'}, not a file")
    with os.fdopen(fd, "rb", buffering=0) as f:
        if stat.S_ISFIFO(mode):
            first = f.read(1 << 16)  # b"" at once when no writer holds the pipe open; None: nothing written yet
            if first == b"":
                raise EvaluationError(f"{path} is a named pipe that nothing is writing to; "
                                      "give the predictions file itself")
            os.set_blocking(fd, True)  # the writer is there: wait for the rest
            return (first or b"") + f.read()
        return f.read()  # O_NONBLOCK does nothing to a regular file


def _read_text(path: Path, where) -> str:
    """The file as text; invalid UTF-8 is an EvaluationError naming its line (where(n) words the place)."""
    raw = _read_bytes(path)
    if raw.startswith(SPREADSHEET_MAGIC):  # before decoding: "not UTF-8 text (byte 0x8f)" would say nothing useful
        raise EvaluationError(f"{path}: {SPREADSHEET_ADVICE}")
    try:
        # utf-8-sig: editors on Windows prepend a BOM that json.loads rejects.
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise EvaluationError(f"{where(line)}: not UTF-8 text (byte {raw[error.start]:#04x})") from None


def _lines(text: str) -> list[str]:
    """The file's lines. JSON Lines end at "\n" only (a "\r" before it is part of the ending): str.splitlines()
    also splits at U+2028, U+2029 and U+0085, which json.dumps(ensure_ascii=False) leaves raw inside a string."""
    lines = text.split("\n")
    if lines[-1] == "":  # the final newline ends the last line; it starts none
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(_lines(text), 1):
        if line.strip():
            yield number, line


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # bool is an int subclass: true is no 1


def _normalise_image_path(path):
    # Predictions written on Windows or with a "./" prefix name the same file.
    return posixpath.normpath(path.replace("\\", "/"))


def load_records(dataset_dir) -> list[dict]:
    """The records of DIR/annotations.jsonl, in file order; EvaluationError names the file and line of a bad one."""
    path = Path(dataset_dir) / ANNOTATIONS_FILE
    if not path.is_file():
        raise EvaluationError(f"no {ANNOTATIONS_FILE} in {dataset_dir}: --dataset names the folder that holds it "
                              "(generate the dataset first if there is none)")
    records, first_line = [], {}
    for number, line in _numbered_lines(_read_text(path, lambda n: f"{path}, line {n}")):
        where = f"{path}, line {number}"
        try:
            record = _parse_json(line)
        except ValueError as error:
            raise EvaluationError(f"{where}: not a JSON record ({error}); "
                                  "regenerate the dataset (a rerun repairs it)") from None
        if not isinstance(record, dict):
            raise EvaluationError(f"{where}: expected a JSON object, got {type(record).__name__}")
        for field, fits in (("image", lambda v: isinstance(v, str)), ("index", _is_int), ("answer", _is_int)):
            if field not in record:
                raise EvaluationError(f"{where}: the record has no {field!r}")
            if not fits(record[field]):
                raise EvaluationError(f"{where}: {field!r} is {_shown(record[field])}")
        for key in (_normalise_image_path(record["image"]), record["index"]):
            if key in first_line:
                raise EvaluationError(f"{where}: repeats {'index' if _is_int(key) else 'image'} {_shown(key)} "
                                      f"(first on line {first_line[key]})")
            first_line[key] = number
        records.append(record)
    _check_complete(dataset_dir, path, len(records))
    return records


def _check_complete(dataset_dir, annotations: Path, count: int) -> None:
    """Stop at an annotations.jsonl holding another number of records than the dataset states: a copy cut
    short would otherwise be graded as if it were the whole dataset."""
    head, document = _dataset_head(dataset_dir)
    stated = _stated_count(document)
    if stated is not None and stated != count:
        raise EvaluationError(f"{annotations} holds {count} records but {head} says the dataset has {stated}: "
                              "the dataset is incomplete or damaged; regenerate it (a rerun repairs it)")


def _dataset_head(dataset_dir) -> tuple["Path | None", dict]:
    """The dataset's data.json (else an export's marker) and its path; {} for JSON that is not an object,
    (None, {}) when neither is there. One that is there but does not read is an EvaluationError."""
    # An export (export.py) carries no data.json; its marker file names the generator and config instead.
    for name in (DATA_FILE, EXPORT_MARKER_FILE):
        path = Path(dataset_dir) / name
        if not os.path.lexists(path):
            continue
        # Present but unreadable: the record count it states cannot be checked, so nothing is graded.
        damaged = f"{path}: damaged ({{}}); regenerate the dataset (a rerun repairs it)"
        if not path.is_file():  # a folder, a dangling link, or a pipe that would never end the read
            raise EvaluationError(damaged.format("not a regular file"))
        try:
            document = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError, RecursionError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "not whole JSON"
            raise EvaluationError(damaged.format(reason)) from None
        return path, document if isinstance(document, dict) else {}
    return None, {}


def _stated_count(document: dict) -> "int | None":
    """How many records the head says the dataset has: num_samples, else config n (hand-made heads); None if neither."""
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    return next((value for value in (document.get("num_samples"), config.get("n")) if _is_int(value)), None)


def load_dataset_info(dataset_dir) -> dict:
    """Who made the dataset, from its data.json: folder, seed, n, generator version and mode ("unknown" if not said)."""
    document = _dataset_head(dataset_dir)[1]
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    if "original_shapes" in config:  # generator 2.0 on
        mode = "original shapes" if config["original_shapes"] else "budgeted"
    elif "balanced" in config:  # before 2.0 the budgeted mode was --balanced and the original shapes the default
        mode = "budgeted" if config["balanced"] else "original shapes"
    else:
        mode = "unknown"
    info = {"folder": str(dataset_dir), "generator_version": document.get("generator_version", "unknown"),
            "seed": config.get("seed", "unknown"), "n": config.get("n", "unknown"), "mode": mode}
    if "answers" in config:
        info["answers"] = config["answers"]
    return info


def _first_reply(value):
    """The reply text in an lmms-eval sample's filtered_resps or resps (a list, maybe of lists), or None."""
    for _ in range(3):
        if not isinstance(value, list) or not value:
            break
        value = value[0]
    return value if isinstance(value, str) else None


def _harness_prediction(sample: dict, where: str) -> dict:
    """A prediction from one lmms-eval --log_samples sample of the tangled_loops task."""
    response = _first_reply(sample.get("filtered_resps", sample.get("resps")))
    if response is None:
        raise EvaluationError(f"{where}: no reply text in the sample's filtered_resps or resps")
    doc = sample.get("doc") if isinstance(sample.get("doc"), dict) else {}
    # The task's process_results passes the record's identity through in its metric values, because
    # newer lmms-eval releases drop "doc" from the samples they write.
    carried = next((value for value in sample.values() if isinstance(value, dict) and "predicted" in value), {})
    prediction = {"response": response}
    if "index" in carried or "index" in doc:
        prediction["index"] = carried.get("index", doc.get("index"))
    elif _is_int(sample.get("doc_id")):
        prediction["position"] = sample["doc_id"]
    else:
        raise EvaluationError(f"{where}: the sample names no item (no doc_id, doc.index or passed-through index)")
    for field in IDENTITY_FIELDS:
        if field in carried or field in doc:
            prediction[field] = carried.get(field, doc.get(field))
    if "answer" not in prediction and "target" in sample:
        prediction["answer"] = sample["target"]
    return prediction


def _table_predictions(path: Path, text: str, delimiter: str) -> Iterator[tuple[str, dict]]:
    """Predictions from a VLMEvalKit result table exported as CSV or TSV (columns index or image, prediction)."""
    # strict: a quote that never closes is an error, not a reply running on to the end of the file.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    # A long chain-of-thought reply may exceed the csv module's default limit of 128 KB per cell.
    limit = csv.field_size_limit(max(csv.field_size_limit(), len(text)))
    try:
        try:
            header = [name.strip() for name in next(reader, [])]
        except csv.Error as error:
            raise EvaluationError(f"{path} line 1: not a {delimiter!r}-separated table ({error})") from None
        repeated = sorted({name for name in header if header.count(name) > 1 and name})
        if repeated:  # which of two 'prediction' columns holds the replies is anyone's guess
            raise EvaluationError(f"{path} line 1: column(s) {_shown(repeated)} appear more than once")
        if "prediction" not in header or not {"index", "image"} & set(header):
            raise EvaluationError(f"{path} line 1: a prediction table needs a 'prediction' column and an "
                                  f"'index' or 'image' column, got {_shown(header)}")
        rows = list(_table_rows(path, reader, delimiter, len(header)))
    finally:
        csv.field_size_limit(limit)
    for _, last, row in rows:
        cells = dict(zip(header, row))
        prediction = {"response": cells["prediction"]}
        if cells.get("index", "").strip():
            index = cells["index"].strip()
            # A short run of digits only: int() of a million digits fails, and one would be no index anyway.
            prediction["index"] = int(index) if re.fullmatch(r"[0-9]{1,18}", index) else index
        if cells.get("image", "").strip():
            prediction["image"] = cells["image"].strip()
        for field in IDENTITY_FIELDS:
            if cells.get(field, "").strip():
                prediction[field] = cells[field].strip()
        yield f"{path} line {last}", prediction


def _table_rows(path: Path, reader, delimiter: str, width: int) -> Iterator[tuple[int, int, list]]:
    """(first line, last line, cells) of each non-blank row after the header."""
    first = reader.line_num + 1
    while True:
        try:
            row = next(reader, None)
        except csv.Error as error:
            if reader.line_num == first:
                raise EvaluationError(f"{path} line {first}: not a {delimiter!r}-separated table ({error})") from None
            # Only a quoted cell spans lines, so the row it opens in is where to look.
            raise EvaluationError(f"{path} line {first}: a quoted cell that opens in this row runs on to line "
                                  f"{reader.line_num} ({error}): an unclosed quote?") from None
        if row is None:
            return
        if any(cell.strip() for cell in row):
            if len(row) != width:
                raise EvaluationError(f"{path} line {reader.line_num}: {len(row)} cells, the header has {width}")
            yield first, reader.line_num, row
        first = reader.line_num + 1


def read_predictions(path) -> Iterator[tuple[str, dict]]:
    """(where, prediction) for each prediction in the file, "where" naming its file and line.

    Formats, told from the name and the content: JSONL of {"image" or "index", "response"}
    lines; lmms-eval --log_samples output (JSONL, a JSON list of samples, or an object whose
    "logs" holds them); a VLMEvalKit table as .csv or .tsv. A prediction is a dict with
    "response", "image" / "index" / "position", and any of IDENTITY_FIELDS.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".xlsx", ".xls"):
        raise EvaluationError(f"{path}: {SPREADSHEET_ADVICE}")
    text = _read_text(path, lambda n: f"{path} line {n}")
    first = next((line for _, line in _numbered_lines(text)), "")
    if suffix in (".csv", ".tsv") or ("prediction" in first and not first.lstrip().startswith(("{", "["))):
        delimiter = "\t" if suffix == ".tsv" or (suffix != ".csv" and "\t" in first) else ","
        yield from _table_predictions(path, text, delimiter)
        return
    document = _one_document(path, text, first.strip())
    if document is not _LINES:
        samples = document.get("logs") if isinstance(document, dict) else document
        if not isinstance(samples, list):
            raise EvaluationError(f"{path}: expected a list of lmms-eval samples (or an object with 'logs')")
        lines = ((f"{path} sample {k}", sample) for k, sample in enumerate(samples, 1))
    else:
        lines = _parsed_lines(path, text)
    for where, item in lines:
        if not isinstance(item, dict):
            raise EvaluationError(f"{where}: expected a JSON object, got {type(item).__name__}")
        if "response" not in item and "doc_id" in item and ("filtered_resps" in item or "resps" in item):
            item = _harness_prediction(item, where)
        yield where, item


_LINES = object()  # _one_document's answer for a file of one JSON value per line


def _one_document(path: Path, text: str, head: str):
    """The file's JSON value if the file is one JSON document (a list of lmms-eval samples, or an object whose
    "logs" holds them), indented or not; _LINES for JSONL. head is the first non-blank line, stripped."""
    try:
        value = _parse_json(text)  # cheap on JSONL: json stops at the second line's "Extra data"
    except ValueError:
        # A document spread over lines (indented) whose first line is no JSON alone: report where it breaks.
        if head in ("[", "{") or (head.startswith("[") and not _parses(head)):
            _raise_malformed_document(path, text)
        return _LINES
    # Also one line (json.dump without indent); a lone prediction object there is a line of JSONL.
    if head == "{" or isinstance(value, list) or (isinstance(value, dict) and "logs" in value):
        return value
    return _LINES


def _raise_malformed_document(path: Path, text: str) -> None:
    """Raise the EvaluationError for a JSON document that does not parse, naming the line where it breaks."""
    try:
        json.loads(text)
    except (ValueError, RecursionError) as error:
        # json counts a line past a final newline; the file's last line is the last one there is.
        line = min(error.lineno, len(_lines(text))) if isinstance(error, json.JSONDecodeError) else None
        place = f"{path} line {line}" if line else f"{path}"
        raise EvaluationError(f"{place}: malformed JSON ({_json_failure(error)})") from None


def _parses(text: str) -> bool:
    try:
        _parse_json(text)
    except ValueError:
        return False
    return True


def _parsed_lines(path: Path, text: str) -> Iterator[tuple[str, object]]:
    for number, line in _numbered_lines(text):
        where = f"{path} line {number}"
        try:
            yield where, _parse_json(line)
        except ValueError as error:
            raise EvaluationError(f"{where}: malformed JSON ({error})") from None


# ---------------------------------------------------------------------------
# Grading: each item's reading, then the figures over all of them


def _wilson_interval(successes, trials, confidence=0.95):
    """Wilson score interval for a binomial proportion; stays inside [0, 1] even at 0/n and n/n."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half_width = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # Clamp only the rounding error at 0/n and n/n (centre - half_width ~ -1e-17).
    return max(0.0, centre - half_width), min(1.0, centre + half_width)


class _Items(NamedTuple):
    """The annotation records, found by image path, by index and by position; by_name finds a record
    by its image's file name alone, to say what a prediction naming "tangled_loops_00007.png" meant."""
    records: list
    by_image: dict
    by_index: dict
    by_name: dict


def _index_records(records: list) -> _Items:
    if not records:
        raise EvaluationError("no annotation records to evaluate against")
    by_image, by_index, by_name = {}, {}, {}
    for record in records:
        image = _normalise_image_path(record["image"])
        if image in by_image or record["index"] in by_index:
            raise EvaluationError(f"annotation records repeat image {record['image']!r} or index {record['index']!r}")
        by_image[image] = record
        by_index[record["index"]] = record
        by_name.setdefault(posixpath.basename(image), record)
    return _Items(records, by_image, by_index, by_name)


def _unknown_image(image, items: _Items) -> str:
    """Why an image names no record, with the form the records use ("images/tangled_loops_00007.png")."""
    named = items.by_name.get(posixpath.basename(_normalise_image_path(image))) if isinstance(image, str) else None
    example = (named or items.records[0])["image"]
    hint = "did you mean" if named else "expected a path relative to the dataset folder, as in annotations.jsonl, such as"
    return f"unknown image {_shown(image)} ({hint} {example!r}, or give its \"index\")"


def _record_for(prediction, items: _Items, where):
    """The annotation record a prediction names by "image", "index" or both (which must agree), or "position"."""
    found = []
    if "image" in prediction:
        image = prediction["image"]
        if not isinstance(image, str) or _normalise_image_path(image) not in items.by_image:
            raise EvaluationError(f"{where}: {_unknown_image(image, items)}")
        found.append(items.by_image[_normalise_image_path(image)])
    if "index" in prediction:
        index = prediction["index"]
        if not _is_int(index) or index not in items.by_index:
            raise EvaluationError(f"{where}: unknown index {_shown(index)}")
        found.append(items.by_index[index])
    if not found and "position" in prediction:
        position = prediction["position"]
        if not _is_int(position) or not 0 <= position < len(items.records):
            raise EvaluationError(f"{where}: doc_id {_shown(position)} is past the dataset's "
                                  f"{len(items.records)} records")
        found.append(items.records[position])
    if not found:
        raise EvaluationError(f"{where}: needs an 'image' or 'index' field")
    if found[0] is not found[-1]:
        raise EvaluationError(
            f"{where}: image {_shown(prediction['image'])} and index {_shown(prediction['index'])} name different items")
    return found[0]


def _same_value(given, expected) -> bool:
    """Whether a passed-through field equals the record's: "7", 7 and 7.0 are one answer; hashes ignore case."""
    if isinstance(given, bool):
        return False
    if isinstance(given, str) and isinstance(expected, str):
        return given.strip().lower() == expected.lower()
    if isinstance(given, str):
        return given.strip() == str(expected)
    return isinstance(given, (int, float)) and given == expected


def _check_identity(prediction, record, where, dataset_label):
    for field in IDENTITY_FIELDS:
        if field in prediction and field in record and not _same_value(prediction[field], record[field]):
            raise EvaluationError(f"{where}: {field} does not match {record['image']} in {dataset_label}: "
                                  "graded against the wrong dataset?")


def _read_responses(predictions_path, items: _Items, dataset_label) -> dict:
    """{record index: response text}; EvaluationError names the bad line."""
    responses, first_line = {}, {}
    for where, prediction in read_predictions(predictions_path):
        record = _record_for(prediction, items, where)
        _check_identity(prediction, record, where, dataset_label)
        if "response" not in prediction:
            raise EvaluationError(f"{where}: missing 'response'")
        if prediction["response"] is None:  # a harness's record of a failed request: no reading, not bad input
            prediction = {**prediction, "response": ""}
        if not isinstance(prediction["response"], str):
            raise EvaluationError(f"{where}: 'response' must be a string, got {_shown(prediction['response'])}")
        if record["index"] in responses:
            raise EvaluationError(f"{where}: duplicate prediction for {record['image']!r} "
                                  f"(first given on {first_line[record['index']]})")
        responses[record["index"]] = prediction["response"]
        first_line[record["index"]] = where.removeprefix(f"{Path(predictions_path)} ")  # "line 4" or "sample 4"
    return responses


def error_figures(pairs) -> dict:
    """Error figures over (true answer, reading or None) pairs: readings and unparsable replies counted,
    and over the parsed ones mean absolute and signed error, off-by-one share, over and under counts."""
    errors = [predicted - truth for truth, predicted in pairs if predicted is not None]
    return {
        "n_unparsed": sum(predicted is None for _, predicted in pairs),
        "n_parsed": len(errors),
        "mean_abs_error": sum(abs(e) for e in errors) / len(errors) if errors else None,
        "bias": sum(errors) / len(errors) if errors else None,
        "off_by_one": sum(abs(e) == 1 for e in errors) / len(errors) if errors else None,
        "n_over": sum(e > 0 for e in errors),
        "n_under": sum(e < 0 for e in errors),
    }


def accuracy_by_count(pairs) -> dict:
    """{true answer: {n_items, n_correct, accuracy}} over (true answer, reading or None) pairs, by answer."""
    per_n = defaultdict(lambda: {"n_items": 0, "n_correct": 0})
    for truth, predicted in pairs:
        per_n[truth]["n_items"] += 1
        per_n[truth]["n_correct"] += predicted == truth
    return {n: {**counts, "accuracy": counts["n_correct"] / counts["n_items"]} for n, counts in sorted(per_n.items())}


def confusion_matrix(pairs, missing=()) -> dict:
    """{truth: {reading or "none": count}}, plus a "missing" column for truths of items with no reply."""
    matrix = defaultdict(Counter)
    for truth, predicted in pairs:
        matrix[truth]["none" if predicted is None else predicted] += 1
    for truth in missing:
        matrix[truth]["missing"] += 1
    return {truth: dict(sorted(row.items(), key=lambda kv: _column_order(kv[0]))) for truth, row in sorted(matrix.items())}


def confusion_columns(confusion: dict) -> list:
    """Every true answer as a column, so the diagonal is whole, then any other reading, "none", "missing"."""
    return sorted({*confusion, *(column for row in confusion.values() for column in row)}, key=_column_order)


def _column_order(column):
    """Readings in numeric order, then "none", then "missing"; also for the strings of a JSON round trip."""
    text = str(column)
    if text.isdigit():
        return (0, int(text))
    return ({"none": 1, "missing": 2}.get(text, 3), 0)


def baselines(answers) -> dict:
    """What a model does without looking: always the most common answer, and a uniform guess."""
    counts = Counter(answers)
    best, best_count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))  # ties: the smaller answer
    return {"baseline_constant": {"answer": best, "accuracy": best_count / len(answers)},
            "chance": 1 / len(counts)}


def crossing_bands(crossings) -> list[tuple[int, int]]:
    """Up to four (low, high) bands of crossing counts, inclusive, split at the quartiles."""
    values = sorted(crossings)
    edges = sorted({values[0], *(values[len(values) * k // 4] for k in (1, 2, 3))})
    return [(low, high - 1) for low, high in zip(edges, edges[1:])] + [(edges[-1], values[-1])]


def accuracy_by_crossings(records, readings) -> list[dict]:
    """Accuracy in quartile bands of the records' num_crossings (records without it are left out)."""
    known = [(r["num_crossings"], readings.get(r["index"]) == r["answer"]) for r in records
             if _is_int(r.get("num_crossings"))]
    if not known:
        return []
    rows = []
    for low, high in crossing_bands([c for c, _ in known]):
        inside = [right for c, right in known if low <= c <= high]
        rows.append({"crossings": [low, high], "n_items": len(inside), "n_correct": sum(inside),
                     "accuracy": sum(inside) / len(inside)})
    return rows


READINGS = {False: "lenient: the count the reply commits to (docs/scoring.md)",
            True: "strict: only \"Answer: N\" ending a line counts"}


def assumed_prompt(records: list) -> str:
    """The prompt the grading assumes: evaluation_prompt of the records' question (a placeholder if the
    records hold none, or not one shared by all)."""
    questions = {record.get("question") for record in records}
    question = questions.pop() if len(questions) == 1 else None
    return evaluation_prompt(question if isinstance(question, str) else "<the record's question>")


def grade(records: list, predictions_path, dataset_dir=None, strict=False) -> tuple[dict, list[dict]]:
    """The report (see evaluate_predictions) and one row per record in dataset order:
    image, answer, predicted (int or None), correct and reply_tail (None for a missing reply)."""
    items = _index_records(records)
    dataset_label = str(dataset_dir) if dataset_dir is not None else "the annotations"
    responses = _read_responses(predictions_path, items, dataset_label)
    read = extract_answer_line if strict else extract_answer
    rows, pairs, missing, readings = [], [], [], {}
    for record in records:
        response = responses.get(record["index"])
        predicted = None if response is None else read(response)
        rows.append({"image": record["image"], "answer": record["answer"], "predicted": predicted,
                     "correct": predicted == record["answer"],
                     "reply_tail": None if response is None else response[-REPLY_TAIL_CHARS:]})
        if response is None:
            missing.append(record)
        else:
            pairs.append((record["answer"], predicted))
            readings[record["index"]] = predicted
    n_items = len(records)
    n_correct = sum(row["correct"] for row in rows)
    low, high = _wilson_interval(n_correct, n_items)
    report = {"dataset": load_dataset_info(dataset_dir)} if dataset_dir is not None else {}
    report.update({
        "predictions": str(predictions_path),
        "prompt": assumed_prompt(records),
        "reading": "strict" if strict else "lenient",
        "n_items": n_items,
        "n_predicted": len(responses),
        "n_missing": len(missing),
        "missing": [record["image"] for record in missing],
        "n_correct": n_correct,
        "accuracy": n_correct / n_items,
        "accuracy_ci95": [low, high],
        # A partial run's headline counts the items it never asked as wrong; this says how the answered fared.
        "accuracy_answered": n_correct / len(responses) if responses else None,
        "per_n": accuracy_by_count((row["answer"], row["predicted"]) for row in rows),
        **error_figures(pairs),
        **baselines([record["answer"] for record in records]),
        "per_crossings": accuracy_by_crossings(records, readings),
        "confusion": confusion_matrix(pairs, [record["answer"] for record in missing]),
    })
    return report, rows


def evaluate_predictions(records: list, predictions_path, dataset_dir=None, strict=False) -> dict:
    """Grade a predictions file (see read_predictions) against the annotation records; strict reads
    each reply with extract_answer_line instead of extract_answer.

    An EvaluationError (a ValueError) naming the 1-based line is raised for malformed JSON,
    a missing or non-string response, an unknown image or index, a second prediction for
    an item, and a passed-through pixel_sha256, seed or answer that differs from the record's.
    Items without a prediction count as wrong and are listed under "missing".

    Returned keys: dataset (with dataset_dir: folder, seed, n, generator_version, mode),
    predictions (the path given), prompt (assumed_prompt), reading ("lenient" or "strict"),
    n_items, n_predicted, n_missing, missing (image paths), n_correct, accuracy and
    accuracy_ci95 (Wilson, over all items), accuracy_answered (n_correct / n_predicted, None
    when nothing was predicted), per_n {answer: {n_items, n_correct, accuracy}},
    n_unparsed (replies with no committed integer), n_parsed, and over the parsed replies
    mean_abs_error, bias (mean signed error), off_by_one (share with |error| == 1), n_over,
    n_under (None where nothing parsed); baseline_constant {answer, accuracy} (always the
    most common answer), chance (1 / distinct answers), per_crossings [{crossings: [low, high],
    n_items, n_correct, accuracy}], confusion {truth: {reading or "none" or "missing": count}}.

    >>> import tempfile, os
    >>> records = [{"image": "images/a.png", "index": 0, "answer": 7},
    ...            {"image": "images/b.png", "index": 1, "answer": 5}]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write('{"image": "images/a.png", "response": "Answer: 7"}\\n')
    >>> report = evaluate_predictions(records, f.name); os.remove(f.name)
    >>> report["accuracy"], report["missing"]
    (0.5, ['images/b.png'])
    """
    return grade(records, predictions_path, dataset_dir, strict)[0]


# ---------------------------------------------------------------------------
# The report: text, files and plots


def _share(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _dataset_line(info: dict) -> str:
    known = ", ".join(f"{label} {info.get(key, 'unknown')}" for key, label in (
        ("generator_version", "generator"), ("seed", "seed"), ("n", "n"), ("mode", "mode")))
    return f"{'dataset':<15}{info.get('folder', 'unknown')}  ({known})"


def _confusion_lines(confusion: dict) -> list[str]:
    columns = confusion_columns(confusion)
    widths = [max(4, len(str(column))) + 1 for column in columns]
    lines = [f"{'truth':>5} " + "".join(f"{column:>{w}}" for column, w in zip(columns, widths))
             + "   (rows: truth, columns: reading)"]
    for truth in sorted(confusion, key=_column_order):
        row = confusion[truth]
        lines.append(f"{truth:>5} " + "".join(f"{row.get(column, 0) or '.':>{w}}" for column, w in zip(columns, widths)))
    return lines


def format_report(report: dict) -> str:
    """A plain-text summary of an evaluate_predictions report (also of its JSON round trip).

    >>> print(format_report({"n_items": 2, "n_predicted": 2, "n_missing": 0, "missing": [],
    ...     "n_correct": 1, "accuracy": 0.5, "accuracy_ci95": [0.0945, 0.9055],
    ...     "per_n": {5: {"n_items": 1, "n_correct": 1, "accuracy": 1.0},
    ...               7: {"n_items": 1, "n_correct": 0, "accuracy": 0.0}},
    ...     "n_unparsed": 0, "n_parsed": 2, "mean_abs_error": 0.5, "off_by_one": 0.5,
    ...     "n_over": 1, "n_under": 0}))
    items                2
    predicted            2
    missing              0
    unparsable           0
    accuracy         0.500  (95% CI 0.095-0.905; missing and unparsable count as wrong)
    mean abs error   0.500  (over 2 parsed)
    off by one       0.500  (share of parsed)
    over / under     1 / 0
    <BLANKLINE>
      N  items  correct  accuracy
      5      1        1     1.000
      7      1        0     0.000
    """
    low, high = report["accuracy_ci95"]
    over_under = f"{report['n_over']} / {report['n_under']}"
    lines = [_dataset_line(report["dataset"])] if "dataset" in report else []
    if "predictions" in report:
        lines.append(f"{'predictions':<15}{report['predictions']}")
    if "prompt" in report:  # the question, then the answer-format line, each line of it indented alike
        lines += [f"{'prompt' if k == 0 else '':<15}{line}" for k, line in enumerate(report["prompt"].split("\n"))]
    if "reading" in report:
        lines.append(f"{'reading':<15}{READINGS[report['reading'] == 'strict']}")
    lines += [""] if lines else []
    lines += [
        f"{'items':<15}{report['n_items']:>7}",
        f"{'predicted':<15}{report['n_predicted']:>7}",
        f"{'missing':<15}{report['n_missing']:>7}",
    ]
    if report["missing"]:
        shown = ", ".join(report["missing"][:5])
        more = f", ... {len(report['missing']) - 5} more" if len(report["missing"]) > 5 else ""
        lines[-1] += f"  ({shown}{more})"
    lines += [
        f"{'unparsable':<15}{report['n_unparsed']:>7}",
        f"{'accuracy':<15}{report['accuracy']:>7.3f}  (95% CI {low:.3f}-{high:.3f}; missing and unparsable count as wrong)",
        f"{'mean abs error':<15}{_share(report['mean_abs_error']):>7}  (over {report['n_parsed']} parsed)",
    ]
    if "accuracy_answered" in report:
        lines.insert(-1, f"{'answered':<15}{_share(report['accuracy_answered']):>7}  "
                         f"(accuracy over the {report['n_predicted']} items with a reply)")
    if "bias" in report:
        bias = "n/a" if report["bias"] is None else f"{report['bias']:+.3f}"
        lines.append(f"{'bias':<15}{bias:>7}  (mean signed error: + counts too many)")
    lines += [
        f"{'off by one':<15}{_share(report['off_by_one']):>7}  (share of parsed)",
        f"{'over / under':<15}{over_under:>7}",
    ]
    if "baseline_constant" in report:
        constant = report["baseline_constant"]
        lines += [
            f"{'best constant':<15}{constant['accuracy']:>7.3f}  (always answering {constant['answer']})",
            f"{'chance':<15}{report['chance']:>7.3f}  (1 / {round(1 / report['chance'])} distinct answers)",
            f"{'gist floor':<15}{GIST_FLOOR['exact']:>7.3f}  ({gist_floor_line()})",
        ]
    lines += ["", f"{'N':>3}  {'items':>5}  {'correct':>7}  {'accuracy':>8}"]
    for n, row in report["per_n"].items():
        lines.append(f"{n:>3}  {row['n_items']:>5}  {row['n_correct']:>7}  {row['accuracy']:>8.3f}")
    if report.get("per_crossings"):
        lines += ["", f"{'crossings':>9}  {'items':>5}  {'correct':>7}  {'accuracy':>8}"]
        for row in report["per_crossings"]:
            band = f"{row['crossings'][0]}-{row['crossings'][1]}"
            lines.append(f"{band:>9}  {row['n_items']:>5}  {row['n_correct']:>7}  {row['accuracy']:>8.3f}")
    if report.get("confusion"):
        lines += ["", *_confusion_lines(report["confusion"])]
    return "\n".join(lines)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write path through a temporary file beside it, so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError as error:  # name the file asked for: the temporary's name means nothing to the user
        raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        if temporary.exists():
            temporary.unlink()


def _pillow():
    """PIL's Image, ImageDraw and ImageFont: imported here only, so that grading without plots needs no Pillow."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise EvaluationError("--report-dir draws its plots with Pillow, which is not installed "
                              "(pip install pillow)") from None
    return Image, ImageDraw, ImageFont


PLOT_INK = (40, 40, 48)
PLOT_BAR = (120, 160, 210)
PLOT_CHANCE = (200, 60, 50)
PLOT_GRID = (225, 225, 230)


ACCURACY_TITLE = "accuracy by N (bars), 95% Wilson interval, dashed: chance"


TITLE_LINE_PX = 14  # one line of the default font, with its spacing


def plot_source(report: dict) -> str:
    """The line naming what a plot shows: the predictions file and the dataset graded."""
    info = report.get("dataset")
    graded = (f"{Path(info['folder']).name or info['folder']} (seed {info.get('seed')}, n {info.get('n')})"
              if info else "the annotations")
    reading = ", strict reading" if report.get("reading") == "strict" else ""
    return f"{Path(report.get('predictions', '?')).name} on {graded}{reading}"


class AccuracyPlotLayout(NamedTuple):
    """Where plot_accuracy_by_count draws, in pixels; the title lines start at (left, 8)."""
    left: int  # the bars' and the title's left edge; the axis labels sit before it
    top: int  # y of the 1.00 grid line
    plot_h: int  # from the 1.00 to the 0.00 grid line
    bar_px: int  # one N's slot, its bar 16 px narrower
    width: int
    height: int
    right: int  # where the grid and the chance line end


def accuracy_plot_layout(n_values: int, title_px: float, title_lines: int = 1) -> AccuracyPlotLayout:
    """The layout of the accuracy-by-N picture for n_values bars and a title of title_lines lines, the
    widest title_px wide as drawn.

    The picture is as wide as its bars need, but never narrower than 260 px nor than its title
    (with 4 answers the bars alone would cut the title off)."""
    left, bottom, bar_px, plot_h, margin = 50, 40, 44, 260, 10
    top = 30 + TITLE_LINE_PX * (title_lines - 1)
    width = max(left + bar_px * n_values + 20, 260, left + math.ceil(title_px) + margin)
    return AccuracyPlotLayout(left, top, plot_h, bar_px, width, top + plot_h + bottom, width - margin)


def plot_accuracy_by_count(per_n: dict, chance: float, source: str = ""):
    """Accuracy per N as bars, each with its 95 % Wilson interval, and chance as a dashed line; source
    (plot_source), if given, heads the picture."""
    Image, ImageDraw, ImageFont = _pillow()
    font = ImageFont.load_default()
    title = [line for line in (source, ACCURACY_TITLE) if line]
    title_px = max(font.getlength(line) for line in title)
    left, top, plot_h, bar_px, width, height, right = accuracy_plot_layout(len(per_n), title_px, len(title))
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)

    def y_of(share):
        return top + plot_h * (1 - share)

    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        draw.line([(left, y_of(tick)), (right, y_of(tick))], fill=PLOT_GRID)
        draw.text((6, y_of(tick) - 6), f"{tick:.2f}", fill=PLOT_INK, font=font)
    for k, (n, row) in enumerate(per_n.items()):
        x0 = left + k * bar_px + 8
        x1 = x0 + bar_px - 16
        draw.rectangle([x0, y_of(row["accuracy"]), x1, y_of(0)], fill=PLOT_BAR)
        low, high = _wilson_interval(row["n_correct"], row["n_items"])
        centre = (x0 + x1) / 2
        draw.line([(centre, y_of(low)), (centre, y_of(high))], fill=PLOT_INK, width=2)
        for share in (low, high):
            draw.line([(centre - 5, y_of(share)), (centre + 5, y_of(share))], fill=PLOT_INK, width=2)
        draw.text((centre - 6, y_of(0) + 6), str(n), fill=PLOT_INK, font=font)
    for x in range(left, right, 12):  # dashed: the chance line
        draw.line([(x, y_of(chance)), (min(x + 6, right), y_of(chance))], fill=PLOT_CHANCE, width=2)
    for k, line in enumerate(title):
        draw.text((left, 8 + TITLE_LINE_PX * k), line, fill=PLOT_INK, font=font)
    draw.text((width // 2 - 4, height - 16), "N", fill=PLOT_INK, font=font)
    return image


CONFUSION_TITLE = "confusion: rows truth, columns reading; shade: share of the row's replies"
PLOT_MISSING = (232, 232, 232)  # the missing column's cells: grey, outside the colour scale


def plot_confusion(confusion: dict, source: str = ""):
    """Truth (rows) by reading (columns, "none" unparsable), each cell's count written in it and
    shaded by its share of the row's replies; the diagonal is outlined. Items with no reply
    ("missing") are counted in a grey column of their own and set no shade: in a partial run they
    would fill each row and fade every reading to white."""
    Image, ImageDraw, ImageFont = _pillow()
    font = ImageFont.load_default()
    columns = confusion_columns(confusion)
    truths = sorted(confusion, key=_column_order)
    title = [line for line in (source, CONFUSION_TITLE) if line]
    cell, left = 36, 70
    top = 60 + TITLE_LINE_PX * (len(title) - 1)
    width = max(left + cell * len(columns), left + math.ceil(max(font.getlength(line) for line in title))) + 10
    image = Image.new("RGB", (width, top + cell * len(truths) + 10), "white")
    draw = ImageDraw.Draw(image)
    for k, line in enumerate(title):
        draw.text((left, 8 + TITLE_LINE_PX * k), line, fill=PLOT_INK, font=font)
    for j, column in enumerate(columns):
        draw.text((left + j * cell + 4, top - 18), str(column), fill=PLOT_INK, font=font)
    for i, truth in enumerate(truths):
        row = confusion[truth]
        replies = sum(count for column, count in row.items() if str(column) != "missing")
        draw.text((left - 30, top + i * cell + 12), str(truth), fill=PLOT_INK, font=font)
        for j, column in enumerate(columns):
            count = row.get(column, 0)
            box = [left + j * cell, top + i * cell, left + (j + 1) * cell - 1, top + (i + 1) * cell - 1]
            fade = 1 - count / replies if replies and str(column) != "missing" else 1
            fill = PLOT_MISSING if str(column) == "missing" else tuple(
                round(255 * fade + c * (1 - fade)) for c in (40, 90, 170))
            diagonal = str(column) == str(truth)
            draw.rectangle(box, fill=fill, outline=PLOT_CHANCE if diagonal else PLOT_GRID, width=2 if diagonal else 1)
            if count:
                ink = "white" if fade < 0.5 else PLOT_INK
                draw.text((box[0] + 6, box[1] + 12), str(count), fill=ink, font=font)
    return image


def _png_bytes(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


REPORT_FILES = ("report.txt", "per_item.jsonl", "accuracy_by_count.png", "confusion.png")


def check_report_dir(report_dir, predictions_path=None) -> None:
    """Refuse, before any report file is written, one that would replace the predictions being graded or
    stand where a folder is (os.replace cannot put a file there, and the files before it would be written)."""
    try:
        graded = os.stat(predictions_path) if predictions_path is not None else None
    except OSError:  # no predictions file: grading says so
        graded = None
    if os.path.lexists(report_dir) and not os.path.isdir(report_dir):
        raise EvaluationError(f"--report-dir {report_dir} exists and is not a folder")
    for name in REPORT_FILES:
        target = Path(report_dir) / name
        try:
            found = os.lstat(target)  # the entry os.replace replaces: a symlink itself, not what it points to
        except OSError:
            continue
        if stat.S_ISDIR(found.st_mode):
            raise EvaluationError(f"{target}: a folder stands where --report-dir writes its {name}; move it away")
        if graded is not None and os.path.samestat(found, graded):
            raise EvaluationError(f"{target} is the predictions file being graded: the report would replace it; "
                                  "choose another --report-dir")


def write_report_dir(report_dir, report: dict, rows: list[dict], text: str) -> None:
    """report.txt, per_item.jsonl, accuracy_by_count.png and confusion.png in report_dir, each written
    atomically; other files there are left alone."""
    report_dir = Path(report_dir)
    check_report_dir(report_dir)
    source = plot_source(report)
    plots = {"accuracy_by_count.png": plot_accuracy_by_count(report["per_n"], report["chance"], source),
             "confusion.png": plot_confusion(report["confusion"], source)}  # drawn first: no Pillow, no files
    report_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(report_dir / "report.txt", (text + "\n").encode("utf-8"))
    per_item = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    _write_atomic(report_dir / "per_item.jsonl", per_item.encode("utf-8"))
    for name, image in plots.items():
        _write_atomic(report_dir / name, _png_bytes(image))


# ---------------------------------------------------------------------------
# CLI


class OneLineParser(argparse.ArgumentParser):
    """Bad input gets one line and exit status 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def folder(text: str) -> Path:
    """A folder argument; an empty one (an unset shell variable) would quietly mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?); pass . for the current folder")
    return Path(text)


def file_path(text: str) -> Path:
    """A file argument, refused when empty (an unset shell variable) rather than read as the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?)")
    return Path(text)


def build_parser(prog: str = "scoring.py") -> OneLineParser:
    p = OneLineParser(prog=prog, description="Grade a model's replies against a tangled-loops dataset "
                                             "(docs/scoring.md: how a reply is read, the formats read).")
    p.add_argument("--evaluate", type=file_path, metavar="PREDICTIONS",
                   help='the replies: JSONL of {"image": ..., "response": ...} lines ("index": N may stand for '
                        '"image", or both if they agree; optionally with pixel_sha256, seed, answer), '
                        "lmms-eval --log_samples output, or a VLMEvalKit .csv/.tsv (run it with PRED_FORMAT=tsv)")
    p.add_argument("--dataset", type=folder, metavar="DIR",
                   help="dataset folder holding annotations.jsonl (default: the folder holding scoring.py)")
    p.add_argument("--strict", action="store_true",
                   help='read only "Answer: N" ending a line, the form the prompt asks for, so that numbers from '
                        "different harnesses compare; any other reply is unparsable")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.add_argument("--report-dir", type=folder, metavar="R",
                   help="also write report.txt, per_item.jsonl, accuracy_by_count.png and confusion.png into R")
    p.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)  # creation.py's flag; nothing to silence
    return p


def _os_message(error: OSError) -> str:
    return f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)


def _print_to_pipe(text: str) -> None:
    """Print text; a reader that left early (| head -1) ends the output quietly, with no traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the same broken pipe: point it at devnull.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


GRADING_FLAGS = ("--evaluate", "--dataset", "--strict", "--json", "--report-dir")


def unknown_flags_message(flags: list[str]) -> str:
    """One line naming flags grading does not take, with the nearest one it does ("--evalute")."""
    named = []
    for flag in flags:
        near = difflib.get_close_matches(flag, GRADING_FLAGS, n=1, cutoff=0.75)
        named.append(f"{flag} (did you mean {near[0]}?)" if near else flag)
    return (f"unknown flag{'s' if len(flags) > 1 else ''}: grading takes only --evaluate PREDICTIONS, "
            f"{', '.join(GRADING_FLAGS[1:-1])} and {GRADING_FLAGS[-1]}, not {', '.join(named)}")


def main(argv: list[str] | None = None, prog: str = "scoring.py") -> int:
    parser = build_parser(prog)
    args, extra = parser.parse_known_args(argv)
    flags = list(dict.fromkeys(arg.partition("=")[0] for arg in extra if arg.startswith("-")))
    if flags:  # before "--evaluate is required": a mistyped --evaluate is the likelier fault
        parser.error(unknown_flags_message(flags))
    if args.evaluate is None:
        generation = "; a generation writes into --out" if prog == "creation.py" else ""
        parser.error(f"--json, --dataset, --strict and --report-dir apply to --evaluate only{generation}"
                     if args.json or args.dataset or args.report_dir or args.strict
                     else "--evaluate PREDICTIONS is required")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    dataset_dir = args.dataset or Path(__file__).resolve().parent
    try:
        if args.report_dir:
            _pillow()
            check_report_dir(args.report_dir, args.evaluate)
        report, rows = grade(load_records(dataset_dir), args.evaluate, dataset_dir, args.strict)
        text = format_report(report)
        if args.report_dir:
            write_report_dir(args.report_dir, report, rows, text)
    except OSError as error:
        print(f"{prog}: error: {_os_message(error)}", file=sys.stderr)
        return 2
    except ValueError as error:  # EvaluationError, and any bad value it did not foresee
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    _print_to_pipe(json.dumps(report, indent=1) if args.json else text)
    if report["n_predicted"] == 0:  # a harness that died before writing would otherwise pass for a model at 0 %
        print(f"{prog}: warning: {args.evaluate} holds no predictions: every item is graded as missing",
              file=sys.stderr)
    if args.report_dir:
        print(f"{prog}: wrote report.txt, per_item.jsonl, accuracy_by_count.png and confusion.png in "
              f"{args.report_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
