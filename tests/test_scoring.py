"""The answer scorer and the predictions evaluator in scoring.py."""

import doctest
import os
import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scoring
from scoring import evaluate_predictions, extract_answer, format_report, score_answer

# ---------------------------------------------------------------------------
# extract_answer: a table of realistic replies
# ---------------------------------------------------------------------------

BOXED_REPLY = "\\boxed{7}"
COT_WITH_LOOP_LABELS = (
    "Let me trace each loop. Loop 1 starts at the top left and crosses Loop 2 twice. "
    "Loop 3 ... Loop 7 is the small one at the bottom. So there are 7 loops."
)
NUMBERED_LIST = (
    "Looking at the image, I can identify the following loops:\n"
    "1. A large loop in the upper left\n2. A loop crossing the centre\n"
    "3. A thin loop on the right\n4. ...\n5. ...\n6. ...\n7. A small loop at the bottom\n\n"
    "Total: 7 distinct closed loops."
)
MARKDOWN_TABLE = (
    "| Loop | Location |\n|---|---|\n| 1 | top |\n| 2 | left |\n| 7 | bottom |\n\n**Total: 7**"
)

CASES = [
    # --- bare answers
    ("7", 7),
    ("7\n", 7),
    ("  7  ", 7),
    ("07", 7),
    ("7.", 7),
    ("7,", 7),
    ("7 loops", 7),
    ("7 loops.", 7),
    ("**7**", 7),
    ("*7*", 7),
    ("`7`", 7),
    ("$7$", 7),
    ("(7)", 7),
    ("#### 7", 7),
    ("0", 0),
    ("11", 11),
    ("共有7个环", 7),
    # --- number words, any case, inside sentences
    ("Seven", 7),
    ("seven", 7),
    ("SEVEN", 7),
    ("Seven.", 7),
    ("eleven loops", 11),
    ("Eleven.", 11),
    ("There are Nine distinct loops.", 9),
    ("The image contains seven distinct closed loops.", 7),
    ("I count twelve loops in total.", 12),
    ("zero", 0),
    ("twenty", 20),
    ("twenty-one", 21),
    ("twenty one loops", 21),
    ("I often see ten loops", 10),  # "often" holds "ten" but is not a number
    ("The seventh loop closes the tangle. Total 7.", 7),  # ordinal word is no count
    ("Someone might see eight loops.", 8),
    # --- "one": a count only where a count is meant
    ("One", 1),
    ("one loop", 1),
    ("The image has one loop.", 1),
    ("There is only one", 1),
    ("Answer: one", 1),
    ("There are 7 loops, including the small red one.", 7),
    ("There are 7 loops (6 if the small one is part of the big one).", 7),  # a bracketed caveat is a detail
    ("I counted the loops one by one: 9 in total", 9),
    ("There are 8 loops; one of them is tiny.", 8),
    ("7 loops. Which one is biggest? The one on the left.", 7),
    ("The red one", None),
    # --- explicit markers
    ("Answer: 7", 7),
    ("answer: 7", 7),
    ("ANSWER: 7", 7),
    ("Answer:7", 7),
    ("Answer = 7", 7),
    ("Answer is 7", 7),
    ("The answer is 7.", 7),
    ("The answer is: 7", 7),
    ("So my answer would be 9.", 9),
    ("**Answer:** 7", 7),
    ("**Answer**: 7", 7),
    ("**Answer: 7**", 7),
    ("Answer:\n\n7", 7),
    ("**Answer:**\n\n**7**", 7),
    ("final answer: **7**", 7),
    ("Final Answer: The final answer is 7. I hope it is correct.", 7),
    ("Answer: Seven", 7),
    ("The answer is: seven.", 7),
    ("Answer: There are seven loops.", 7),
    ("Answer: 07", 7),
    (BOXED_REPLY, 7),
    ("The answer is $\\boxed{7}$.", 7),
    ("Answer: \\boxed{7}", 7),
    ("\\boxed{\\text{7}}", 7),
    ("\\boxed{7 \\text{ loops}}", 7),
    ("<answer>7</answer>", 7),
    ("<answer>\n7\n</answer>", 7),
    ("<ANSWER>seven</ANSWER>", 7),
    ("<answer>There are 7 loops.</answer>", 7),
    ("I think **7**", 7),
    ("The count is **7**.", 7),
    ("So the total is **7 loops**.", 7),
    # --- the marker wins over later numbers
    ("Answer: 7. I traced each loop ...1 2 3", 7),
    ("Answer: 7\n\nExplanation: Loop 1 crosses Loop 2 at 12 points.", 7),
    ("Answer: 7\nConfidence: 60%", 7),
    ("Answer: 7 (Loops 1-7)", 7),
    ("Answer: 7, because loops 1 to 7 are each closed.", 7),
    ("answer: 7; loops 3 and 5 interlock", 7),
    ("Answer: 7 closed loops, namely loops 1-7", 7),
    ("Answer: 7\n\n**Loop 3**", 7),  # a bold label at the end is not a verdict
    # --- several markers: the last one holding a number
    ("Answer: 5\nWait, I missed two. Answer: 7", 7),
    ("\\boxed{5} ... on reflection \\boxed{7}", 7),
    ("Answer: 6\n\nWait, recounting: **7**", 7),
    ("Answer: 7\n\nI hope this answer is helpful.", 7),
    ("Answer: 7\n\nThe answer is based on tracing each curve.", 7),
    ("Answer with a single integer in the form 'Answer: N'.\nThere are 8 loops.", 8),
    # --- no marker: the last number
    ("I count 7 loops.", 7),
    ("There are 5 ... no, 7 loops", 7),
    ("I count 6 loops. Wait, let me recount... Actually there are 7 loops.", 7),
    ("7 loops? No wait, 8.", 8),
    ("After careful tracing, I believe there are 8 closed loops in total.", 8),
    (COT_WITH_LOOP_LABELS, 7),
    (NUMBERED_LIST, 7),
    (MARKDOWN_TABLE, 7),
    ("To answer this, I count the loops: there are 9.", 9),
    ("The answer isn't obvious, but I count 8.", 8),
    ("There are 7 loops, 100% sure.", 7),  # a percentage is never the count
    ("I see 2D curves; 7 loops", 7),  # "2D" is not a number
    ("The 3rd loop is the largest; 7 in total.", 7),
    ("About 7 loops.", 7),
    ("approximately 7", 7),
    ("~7", 7),
    ("7 or seven", 7),  # the same number twice is no hedge
    ("7 (seven)", 7),
    ("Total -> 7", 7),
    ("> 7", 7),  # markdown quote, not "more than"
    # --- the count among other numbers: parts, labels and numbers set aside never outrank it
    ("There are 7 loops in the image, with 2 of them being larger than the others.", 7),
    ("I count **7** closed loops (4 circles and 3 irregular shapes).", 7),
    ("There are 7 loops: 3 red, 2 blue and 2 green.", 7),
    ("I see 7 distinct closed loops. Two of them are interlinked.", 7),
    ("There are 7 closed loops; one of them is twisted into a figure-eight.", 7),
    ("There are 7 closed loops, including one that forms a figure-8.", 7),
    ("There are 7 loops, one for each color.", 7),
    ("There are 7 loops, each with 2 crossings.", 7),
    ("There are 7 loops; several meet at three-way crossings.", 7),
    ("There are 7 loops, at least 2 of which overlap.", 7),
    ("There are 7 loops, with more than 10 crossings between them.", 7),
    ("There are **7** distinct closed loops:\n\n1. Red loop - upper left\n2. Blue loop\n3. Green loop\n"
     "4. Yellow loop\n5. Purple loop\n6. Orange loop\n7. Teal loop - passes under loops 2 and 5", 7),
    ("**Step 1: Trace strands**\nI find 7 closed loops.\n\n**Step 2: Verify**\nNo loop was counted twice.", 7),
    ("There are 7 loops (labelled 1-7 above).", 7),
    ("Loop 1: red\nLoop 2: blue\nLoop 7: brown (crosses Loop 2)", None),  # labels only: no count given
    ("I count 7 loops, not 8.", 7),
    ("I count 7 loops (I initially thought 6).", 7),
    ("I count 7 loops, though my count could be off by 1.", 7),
    ("I count 7 loops. The tangle is dense, so I may have missed 1 or 2.", 7),
    ("There are 7 loops.\nConfidence: 8/10", 7),
    ("Number of loops: 7 (3 large, 4 small)", 7),
    ("Final count: **7** loops\n\n(Loops 3 and 5 are hard to separate.)", 7),
    ("It's hard to give an exact answer: loops 3 and 4 may be a single loop. I'd say 7.", 7),
    ("The answer is not 6, it's 7.", 7),
    ("Answer: not 8 but 7", 7),
    ("Answer: After tracing all 12 crossings, there are 7 loops.", 7),
    ("Answer: Loops 1 through 7, so 7 in total.", 7),
    ("5 loops are clearly visible and 2 are partially hidden, so I count 7 tangled together.", 7),
    ("There are 6 obvious loops and one hidden behind the others, so there are 7 in the image.", 7),
    ("There are 2 big loops and 5 small ones, so 7 here.", 7),
    ("The two large loops are easy to spot; tracing the rest, I count 7 of them.", 7),
    ("There are 7 loops – 4 are large and 3 are small.", 7),
    ("Answer: 7 loops\n- 3 large loops\n- 4 small loops", 7),  # a bullet's dash is no range
    ("- 3 large loops\n- 4 small loops\n\n**7 loops**", 7),
    ("Answer: 7 loops (possibly 2 are partially hidden)", 7),  # "possibly" with no second count
    ("There are 5 ... no. 7 loops.", 7),
    ("As noted earlier there are 7 loops.", 7),
    ("One loop is twisted into a figure-8, and 7 loops are visible in total.", 7),
    ("I have traced and labeled 7 distinct loops in the image.", 7),
    ("Distinct closed loops - 7", 7),
    ("Number of loops    7", 7),
    # --- what the reply asserts, or states as a total, outranks what it describes
    ("There are 7 loops; 3 are fully visible and 4 are partially hidden.", 7),
    ("There are **7** loops.\n\n- 2 loops are nested inside the largest one.\n- 3 loops cross near the center.", 7),
    ("Out of the 7 loops, 3 are fully visible.", 7),
    ("There are 7 loops.\n\nBreakdown:\n- Large: 1\n- Medium: 2\n- Small: 4", 7),
    ("7 loops: 2 big, 3 mid-sized, 2 small.", 7),
    ("There are 7 loops: six inner loops and one outer loop.", 7),
    ("There are **7** loops in total:\n\n- **Large loops:** 2\n- **Small loops:** 5", 7),
    ("Answer: There are 3 large loops and 4 small loops, making 7 in total.", 7),
    ("I count 7 loops.\n\nNote: Loops 2 and 6 could be read as a single loop, which would give 6.", 7),
    ("Let me count region by region. Top left: 2 loops, so the total is 2. Center: 3 more, so the total "
     "is 5. Bottom: 2 more. That gives 7 loops.", 7),  # a running total gives way to the final count
    ("There are 7 loops, arranged in 2 clusters.", 7),
    ("There are 7 loops, in 5 different colors.", 7),
    ("There are 7 loops, each crossing 2 or 3 others.", 7),
    ("There are **7** distinct closed loops.\n\n| # | Color | Position |\n|---|---|---|\n| 1 | Red | (120, 340) |\n"
     "| 3 | Green | (260, 250) |", 7),  # a table row is a detail
    ("There are 7 loops. The image is 512 × 512 pixels.", 7),
    ("There are 7 loops. The largest spans from x=50 to x=400.", 7),
    ("There are 7 loops, as of this analysis on 12/05/2024.", 7),
    ("There are 7 loops: red ×2, blue ×2, green ×3.", 7),
    ("I count 7 loops. I'd rate my confidence 4 out of 5.", 7),
    ("There are 7 loops.\nConfidence level: 8/10", 7),
    ("There are 7 loops. <points x1=\"12.5\" y1=\"30.2\" alt=\"loops\">loops</points>", 7),
    # --- "one" as a pronoun, however it is described
    ("There are 7 loops; the top-left one is the largest.", 7),
    ("There are 7 loops, including a medium-sized one.", 7),
    ("There are 7 loops, including an 8-shaped one.", 7),
    ("I can identify **7** distinct closed loops. One is partially hidden behind the others.", 7),
    ("There are 7 loops. One more could be hiding behind the blue one, but I don't think so.", 7),
    # --- a correction: what follows the last one, if it holds a count
    ("So the answer is 6.\n\nWait, let me double-check. The blue strand closes on itself, so there are 7 loops.", 7),
    ("Answer: 6. Actually, correcting myself: 7.", 7),
    ("I count 7 loops. My earlier count of 6 missed the hidden one.", 7),
    ("The answer is 7 after recounting, 6 + 1 hidden.", 7),
    ("Answer: 7\n\nWait, is that right? Yes.", 7),
    ("The answer is 7. Actually, 2 of them are small.", 7),
    # --- from the code review
    ("There are 7 loops. Loop no. 3 is the largest.", 7),  # "no." as an abbreviation is no correction
    ("Answer: 7\n\nNote: the error-correction step was skipped for 2 loops.", 7),
    ("Answer: 7 (correcting my count of 6)", 7),  # a correction in brackets stays a detail
    ("I saw 6 loops at first glance :( hard image. There are 7 loops.", 7),  # a smiley opens no bracket
    ("There are 7 loops. Two of the 3 red loops overlap.", 7),
    ("There are 7 loops. Each loop has 2 neighbours.", 7),
    ("The biggest is loop 3, and 7 loops in total.", 7),  # a label list stops at a count
    ("There are 7 loops, possibly 2 loops are hidden.", 7),
    ("There are 7 self-intersection points and 3 loops", 3),
    ("The answer is one.", 1),
    ("The image shows one closed curve.", 1),
    # --- a conditional count is a caveat, not the answer
    ("Answer: 7\n\nNote: the answer would be 8 if the small ring counts as separate.", 7),
    ("I'd say 7, but it could be 8 if the knot at the top is two loops.", 7),
    ("If the ring counts, 8; otherwise there are 7 loops.", 7),
    ("Answer: 2 red, 2 blue and 3 green loops, i.e. 7.", 7),  # "i.e." ends no clause
    ("There are 7 loops, possibly more hidden.", None),  # a bound
    ("There are 7 loops or more.", None),
    ("There are 7 loops if I counted right.", 7),
    ("It could be 4 loops if the central crossing is a self-intersection, or 5 if two loops cross there.", None),
    ("Either 5 or 6 loops, since I can't tell whether the two curves there connect.", None),  # "the two curves": particular ones
    # --- sums: only the result counts
    ("The total is 4 + 3 = 7.", 7),
    ("Total: 3 + 2 + 2 = 7 loops", 7),
    ("Count: 2 (red) + 3 (blue) + 2 (green) = 7", 7),
    # --- a total or a count stated as such is a marker; JSON keys too
    ("**Answer: 6**\n\nOn closer inspection loop 4 is two separate loops, so the total is 7.", 7),
    ("**Final Answer:**\n1. Red\n2. Blue\n3. Green\n4. Yellow\n5. Purple\n6. Orange\n7. Pink\n\nTotal = 7", 7),
    ("A total of 7 loops, crossing at 12 points.", 7),
    ('{"count": 7, "confidence": 0.8}', 7),
    ('```json\n{"answer": 7, "confidence": 0.85}\n```', 7),
    ('{"answer": 7, "explanation": "Loops 1-7 are each closed."}', 7),
    ('{"loops": 7, "reasoning": "Traced each strand; 2 loops overlap."}', 7),
    ('{"count": 7, "loops": [1, 2, 3, 4, 5, 6, 7]}', 7),
    ("Loops: 7\nCrossings: 12", 7),
    # ... but not a tally of something else, nor a breakdown
    ("The loops create a total of 14 crossings. Tracing each strand, I find 7 loops.", 7),
    ("Answer: 7\n\n(Total of 12 crossings between the loops.)", 7),
    ("Answer: 7\nCrossings total: 15", 7),
    ("In total there are 7 loops. The total number of crossings is 14.", 7),
    ("I count 7 loops. The number of crossings is **12**.", 7),
    ("Here's my count:\n\n- Red: 3\n- Blue: 2\n- Green: 2\n\nThat makes 7 loops.", 7),
    ("Let me count: 1, 2, 3, 4, 5, 6, 7, 8. Hmm, I double counted one. So 7.", 7),
    ("Number of large loops: 4\nNumber of small loops: 3\n\nSo there are 7 loops.", 7),
    ("Answer: 7\n\nThe count is based on tracing 3 overlapping regions.", 7),
    ("答案：７", 7),  # full-width digit
    # --- reasoning blocks: only the text after </think> is the reply
    ("<think>answer is 5</think> 7", 7),
    ("<think>I see 5 loops... the answer is 5</think>\nAnswer: 7", 7),
    ("the draft says 5</thinking>There are 8 loops.", 8),
    ("Reasoning about 7 loops </think>", None),
    ("◁think▷I see 5 loops... so the answer is 6?◁/think▷There are 7 distinct closed loops.", 7),
    ("<think>\nLoop 1 is red. Loop 2 is blue. So far 5 loops, and the next", None),  # cut short
    ("<think>The answer is 6.</think>", None),
    ("I need to think about this. <think> is not needed. There are 7 loops.", 7),  # not a draft: not at the start
    ("There are " + "7" * 400 + " loops.", None),  # a model stuck repeating: no count, and no crash
    # --- from a grading review: a commitment after the counts is asserted ...
    ("I counted 5 loops on the first pass and 6 on the second; I'll go with 6.", 6),
    ("I counted 5 loops on the first pass and 6 on the second; I'd go with 6.", 6),
    ("I counted 5 loops on the first pass and 6 on the second; my final answer is 6.", 6),
    ("First pass: 5 loops. Second pass: 6 loops. I'll go with 6.", 6),
    ("There are 6 or 7 loops; I'd say 7.", 7),
    ("There are 6 or 7 loops. I would say 6.", 6),
    ("I see 7 loops, maybe 8. I'm going with 8.", 8),
    ("It's either 5 or 6 loops; I'll stick with 6.", 6),
    ("Top half: I'd say 3 loops. Bottom half: 4 more. So there are 7 loops.", 7),  # a later claim still wins
    ("I'll go with 7 or 8.", None),
    # ... a hedge opening a later clause names a second candidate ...
    ("Answer: 6 loops, although I'm not fully sure — maybe 7.", None),
    ("There are 10 closed loops. However, some crossings are ambiguous, so it could be 11.", None),
    ("There are 10 loops. Two strands are hard to separate, so it might be 11.", None),
    ("I count 8 loops; the top is unclear, possibly 9.", None),
    ("Answer: 7 loops. The knot on the left is tricky; there may be 8.", None),
    ("I count 7 loops. Loop 3 might be 2 separate loops, which would give 8.", 7),  # a part's hedge, not the count's
    ("There are 7 loops. Perhaps 2 of them are nested.", 7),
    ("There are 7 loops. Loop 4, however, might be 2.", 7),
    ("Answer: 7\n\nThe knot at the bottom is tricky; it might be 2 loops.", 7),  # a note after a blank line
    ("There are 7 loops. Wait, it could be 8.", None),  # a hedged correction commits to neither
    ("There are 5 ... no, 7 loops. The tangle is dense, so it could be 8.", None),
    ("There are 5 ... no, 7 loops, not 8.", 7),
    # ... and two counts of kinds of loops joined by "and" are a breakdown with no total
    ("There are 5 large loops and 2 small loops.", None),
    ("I count 4 red loops and 3 blue loops.", None),
    ("There are 3 inner loops and 4 outer loops.", None),
    ("I see five big loops, and two tiny loops.", None),
    ("There are 5 large loops and 2 small loops, 7 in total.", 7),
    ("There are 12 crossings and 10 loops.", 10),
    ("12 crossings and 10 loops", 10),
    ("There are 7 loops and 2 loops overlap at the top.", 7),
    # --- two candidates or a range: no commitment
    ("The answer is 7 or 8", None),
    ("Answer: 7 or 8. I lean towards 7.", None),
    ("7-8", None),
    ("7 - 8", None),
    ("Answer: 7–8", None),
    ("7 to 8 loops", None),
    ("between 7 and 8", None),
    ("Between 7 and 8 loops.", None),
    ("somewhere between seven and eight", None),
    ("either 6 or 7", None),
    ("It's either 6 or 7.", None),
    ("7/8", None),
    ("Answer: 7 (or possibly 8)", None),
    ("**7** or **8**", None),
    ("\\boxed{7 \\text{ or } 8}", None),
    ("There might be 7 or 8 loops.", None),
    ("I count 7, possibly 8 loops.", None),
    ("There are 7 loops (maybe 8).", None),
    ("Likely 7, but it could be 8.", None),
    ("I think it's 6, but it could be **7**", None),
    ("7 ± 1 loops", None),
    ("7, give or take 1", None),
    ("Es gibt 7 oder 8 Schleifen.", None),
    ("Il y a 7 ou 8 boucles.", None),
    ("7, or it could be 8", None),
    ("I count 7 loops, although it might be 8.", None),
    ("at least 7", None),
    ("At least 7 loops", None),
    ("more than 6 loops", None),
    ("Answer: > 6", None),
    ("7+", None),
    ("7 or more", None),
    # ... also as a list ending in an alternative, a question, or a final answer taken back
    ("Answer: 7, 8, or 9", None),
    ("Answer: 7, 8 or 9 loops.", None),
    ("I count 7,8 or 9", None),
    ("7? Or is it 8?", None),
    ("Is it 7 or is it 8?", None),
    ("There appear to be 6 loops, although one could argue for 7.", None),
    ("There are 6 loops, though some might say 7.", None),
    ("There are seven loops. Final answer: 7. Actually no, 8.", None),
    ("There are 7 loops, 3 of them red, 2 blue or green.", 7),  # details, not candidates
    ("One could miss the small one, but there are 7 loops.", 7),  # "one could" is a pronoun
    ("Answer: 7? Yes, 7.", 7),
    # --- not an integer count
    ("Answer: 2^3", None),
    ("There are 2³ loops", None),
    ("There are 8 loops (2^3).", 8),
    ("7.5", None),
    ("Answer: 7.5", None),
    ("answer: 7.0", 7),
    ("Answer: 1,000", 1000),  # a thousands separator: the number reads whole
    ("There are 12,345 loops.", 12345),
    ("Answer: 1,000.5", None),
    ("I count 7 loops, 1, 2 or 3 of them small.", 7),  # a list of details, not a thousands separator
    ("-7", None),
    ("Answer: -3", None),
    ("Answer: −7", None),  # U+2212 minus sign
    ("7th loop", None),
    ("", None),
    ("   ", None),
    ("I cannot determine the number of loops.", None),
    ("Many loops.", None),
    ("N/A", None),
    ("Answer: N", None),
    ("The answer is unclear.", None),
]


@pytest.mark.parametrize("response, expected", CASES)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


# Replies written by three review rounds to trip the reader, then 120 ordinary ones
# written blind (before reading the code), each with what a careful grader reads;
# "misread" marks the ones it still gets wrong (mostly not English, or with no stated
# count). A fix turns their strict xfail red.
REVIEW_REPLIES = [json.loads(line) for line in
                  (Path(__file__).parent / "scoring_replies.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("row", [
    pytest.param(row, marks=pytest.mark.xfail(strict=True, reason="known misread")) if row["misread"] else row
    for row in REVIEW_REPLIES])
def test_review_replies(row):
    assert extract_answer(row["reply"]) == row["expected"]


def test_case_table_has_no_duplicate_inputs():
    responses = [response for response, _ in CASES]
    assert len(responses) == len(set(responses))


@pytest.mark.parametrize(
    "response, answer, score",
    [
        ("Answer: 7", 7, 1.0),
        ("Answer: 7", 8, 0.0),
        ("Answer: 10", 1, 0.0),  # "1" is a substring of "10"
        ("1", 10, 0.0),
        ("Answer: 11", 1, 0.0),
        ("There are 5 ... no, 7 loops", 5, 0.0),  # not the first number
        ("There are 5 ... no, 7 loops", 7, 1.0),
        ("The image contains seven distinct closed loops.", 7, 1.0),
        ("The answer is 7 or 8", 7, 0.0),
        ("The answer is 7 or 8", 8, 0.0),
        ("7-8", 8, 0.0),
        ("", 7, 0.0),
    ],
)
def test_score_answer(response, answer, score):
    assert score_answer(response, answer) == score


# ---------------------------------------------------------------------------
# extract_answer: properties
# ---------------------------------------------------------------------------

# Filler with digits and punctuation but no markers ("<", "*", "\", "answer"
# cannot be spelled without "w"), so the reply's last marker is the one we add.
MARKERLESS_TEXT = st.text(alphabet="abcdeilnorstuy 0123456789.,:\n-", max_size=80)
# Filler with neither digits nor number words (no vowels, so no "one", "ten").
NUMBERLESS_TEXT = st.text(alphabet="bcdfghklmprst ,;:\n", max_size=60)
WORDS = {value: word for word, value in scoring._NUMBER_WORDS.items()}


@settings(deadline=None)
@given(st.text(max_size=300))
def test_extract_answer_never_fails_and_gives_a_count(response):
    value = extract_answer(response)
    assert value is None or (isinstance(value, int) and value >= 0)


@settings(deadline=None)
@given(MARKERLESS_TEXT, st.integers(0, 1000))
def test_the_final_marker_wins_over_any_reasoning(reasoning, n):
    assert extract_answer(f"{reasoning}\nAnswer: {n}") == n


@settings(deadline=None)
@given(MARKERLESS_TEXT, st.integers(0, 20))
def test_a_final_marker_accepts_number_words(reasoning, n):
    assert extract_answer(f"{reasoning}\nAnswer: {WORDS[n].capitalize()}.") == n


@settings(deadline=None)
@given(NUMBERLESS_TEXT, NUMBERLESS_TEXT, st.integers(0, 1000))
def test_a_lone_number_is_the_answer(before, after, n):
    assert extract_answer(f"{before} {n} {after}") == n


@settings(deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(1, 30),
       st.sampled_from(["{k} of them are small", "{k} red and {m} blue", "Loop {k} crosses Loop {m}",
                        "loops {k} and {m} interlock", "{k} crossings in all", "not {m}", "Step {k}: done",
                        "I initially thought {m}", "Confidence: {k}/{m}"]))
def test_details_after_a_count_of_loops_leave_it_the_answer(n, k, m, detail):
    assert extract_answer(f"There are {n} loops. {detail.format(k=k, m=m)}.") == n


@settings(deadline=None)
@given(st.integers(0, 200), st.integers(0, 200))
def test_a_bare_number_scores_only_its_own_value(n, answer):
    # Guards against substring matching ("1" in "10") and first-digit parsing.
    assert score_answer(str(n), answer) == (1.0 if n == answer else 0.0)


@settings(deadline=None)
@given(
    st.integers(0, 100),
    st.integers(0, 100),
    st.sampled_from(["{a} or {b}", "{a}-{b}", "between {a} and {b}", "either {a} or {b}", "Answer: {a} to {b}"]),
)
def test_two_different_numbers_are_no_answer(a, b, template):
    value = extract_answer(template.format(a=a, b=b))
    assert value == (a if a == b else None)


def test_docstring_examples():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for function in (extract_answer, score_answer, evaluate_predictions, format_report):
        for test in finder.find(function, globs=vars(scoring)):
            runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


# ---------------------------------------------------------------------------
# evaluate_predictions
# ---------------------------------------------------------------------------

RECORDS = [
    {"image": "images/tangled_loops_00000.png", "index": 0, "answer": 5},
    {"image": "images/tangled_loops_00001.png", "index": 1, "answer": 5},
    {"image": "images/tangled_loops_00002.png", "index": 2, "answer": 7},
    {"image": "images/tangled_loops_00003.png", "index": 3, "answer": 7},
    {"image": "images/tangled_loops_00004.png", "index": 4, "answer": 9},
    {"image": "images/tangled_loops_00005.png", "index": 5, "answer": 11},
]


def write_lines(tmp_path, lines):
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def prediction(response, image=None, index=None):
    item = {"image": image} if image is not None else {"index": index}
    return json.dumps({**item, "response": response})


@pytest.fixture
def mixed_predictions(tmp_path):
    """Right, over by one, right (word), unparsable, under by two; item 5 missing."""
    return write_lines(tmp_path, [
        prediction("Answer: 5", image="images/tangled_loops_00000.png"),
        "",
        prediction("I count 6 loops.", index=1),
        prediction("seven", image="images/tangled_loops_00002.png"),
        prediction("I can't tell.", image="images/tangled_loops_00003.png"),
        "   ",
        prediction("Answer: 7", index=4),
    ])


def test_evaluate_counts_checked_by_hand(mixed_predictions):
    report = evaluate_predictions(RECORDS, mixed_predictions)
    assert report["n_items"] == 6
    assert report["n_predicted"] == 5
    assert report["n_missing"] == 1
    assert report["missing"] == ["images/tangled_loops_00005.png"]
    assert report["n_correct"] == 2
    assert report["accuracy"] == pytest.approx(2 / 6)
    assert report["n_unparsed"] == 1
    assert report["n_parsed"] == 4
    # Parsed errors (predicted - true): 0, +1, 0, -2.
    assert report["mean_abs_error"] == pytest.approx(3 / 4)
    assert report["off_by_one"] == pytest.approx(1 / 4)
    assert (report["n_over"], report["n_under"]) == (1, 1)
    assert report["per_n"] == {
        5: {"n_items": 2, "n_correct": 1, "accuracy": 0.5},
        7: {"n_items": 2, "n_correct": 1, "accuracy": 0.5},
        9: {"n_items": 1, "n_correct": 0, "accuracy": 0.0},
        11: {"n_items": 1, "n_correct": 0, "accuracy": 0.0},
    }
    # Wilson interval for 2/6 at 95%, from the closed form.
    assert report["accuracy_ci95"] == pytest.approx([0.0968, 0.7000], abs=1e-4)


def test_report_is_json_serialisable(mixed_predictions):
    json.dumps(evaluate_predictions(RECORDS, mixed_predictions))


def test_all_right(tmp_path):
    path = write_lines(tmp_path, [prediction(f"Answer: {r['answer']}", index=r["index"]) for r in RECORDS])
    report = evaluate_predictions(RECORDS, path)
    assert report["accuracy"] == 1.0
    assert report["mean_abs_error"] == 0.0
    assert report["off_by_one"] == 0.0
    assert report["accuracy_ci95"][1] == 1.0
    assert report["accuracy_ci95"][0] == pytest.approx(0.6097, abs=1e-4)


def test_all_wrong_and_unparsable(tmp_path):
    path = write_lines(tmp_path, [prediction("no idea", index=r["index"]) for r in RECORDS])
    report = evaluate_predictions(RECORDS, path)
    assert report["accuracy"] == 0.0
    assert report["accuracy_ci95"] == pytest.approx([0.0, 0.3903], abs=1e-4)
    assert report["n_unparsed"] == 6
    assert report["mean_abs_error"] is None and report["off_by_one"] is None
    assert (report["n_over"], report["n_under"]) == (0, 0)


def test_empty_file_reports_everything_missing(tmp_path):
    report = evaluate_predictions(RECORDS, write_lines(tmp_path, []))
    assert report["n_predicted"] == 0
    assert report["n_missing"] == 6
    assert report["accuracy"] == 0.0


@pytest.mark.parametrize(
    "successes, trials, low, high",
    # Reference values of the Wilson score interval at 95%.
    [(7, 10, 0.3968, 0.8922), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (50, 100, 0.4038, 0.5962)],
)
def test_wilson_interval(successes, trials, low, high):
    assert scoring._wilson_interval(successes, trials) == pytest.approx((low, high), abs=1e-4)


def test_image_paths_are_normalised(tmp_path):
    path = write_lines(tmp_path, [
        prediction("5", image="./images/tangled_loops_00000.png"),
        prediction("5", image="images\\tangled_loops_00001.png"),
    ])
    assert evaluate_predictions(RECORDS, path)["n_correct"] == 2


def test_image_and_index_may_both_be_given(tmp_path):
    line = json.dumps({"image": "images/tangled_loops_00000.png", "index": 0, "response": "5"})
    assert evaluate_predictions(RECORDS, write_lines(tmp_path, [line]))["n_correct"] == 1


def test_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text(prediction("5", index=0) + "\n", encoding="utf-8-sig")
    assert evaluate_predictions(RECORDS, str(path))["n_correct"] == 1


@pytest.mark.parametrize(
    "lines, message",
    [
        (["", "", '{"index": 0, "response": "5"'], r"line 3: malformed JSON"),
        ([prediction("5", index=0), "not json"], r"line 2: malformed JSON"),
        (['[0, "5"]', prediction("5", index=0)], r"line 1: expected a JSON object, got list"),
        (['[0, "5"]'], r"sample 1: expected a JSON object, got int"),  # one line, one document: a list of samples
        (['{"index": 0}'], r"line 1: missing 'response'"),
        (['{"index": 0, "answer": "5"}'], r"line 1: missing 'response'"),
        (['{"index": 0, "response": ["5"]}'], r"line 1: 'response' must be a string"),
        (['{"index": 0, "response": 5}'], r"line 1: 'response' must be a string"),
        (['{"response": "5"}'], r"line 1: needs an 'image' or 'index' field"),
        ([prediction("5", image="images/tangled_loops_00099.png")], r"line 1: unknown image"),
        ([prediction("5", image="tangled_loops_00000.png")], r"line 1: unknown image"),
        ([prediction("5", index=99)], r"line 1: unknown index 99"),
        ([prediction("5", index="0")], r"line 1: unknown index '0'"),
        (['{"index": true, "response": "5"}'], r"line 1: unknown index True"),
        (
            ['{"image": "images/tangled_loops_00000.png", "index": 1, "response": "5"}'],
            r"line 1: image .* and index 1 name different items",
        ),
        (
            [prediction("5", index=0), "", prediction("6", image="images/tangled_loops_00000.png")],
            r"line 3: duplicate prediction for 'images/tangled_loops_00000.png' \(first given on line 1\)",
        ),
        (
            [prediction("5", index=2), prediction("5", index=2)],
            r"line 2: duplicate prediction",
        ),
    ],
)
def test_bad_prediction_lines_raise(tmp_path, lines, message):
    path = write_lines(tmp_path, lines)
    with pytest.raises(ValueError, match=message):
        evaluate_predictions(RECORDS, path)


def test_error_names_the_file(tmp_path):
    path = write_lines(tmp_path, ["{"])
    with pytest.raises(ValueError, match="predictions.jsonl line 1"):
        evaluate_predictions(RECORDS, path)


def test_bad_records_raise(tmp_path):
    path = write_lines(tmp_path, [])
    with pytest.raises(ValueError, match="no annotation records"):
        evaluate_predictions([], path)
    with pytest.raises(ValueError, match="repeat"):
        evaluate_predictions(RECORDS + [dict(RECORDS[0], index=9)], path)


# ---------------------------------------------------------------------------
# format_report
# ---------------------------------------------------------------------------

def test_format_report_shows_the_figures(mixed_predictions):
    text = format_report(evaluate_predictions(RECORDS, mixed_predictions))
    lines = text.splitlines()
    assert lines[:5] == [f"predictions    {mixed_predictions}",
                         "prompt         <the record's question>",  # RECORDS hold no question
                         "               Answer with a single integer in the form 'Answer: N'.",
                         'reading        lenient: the count the reply commits to (docs/scoring.md)', ""]
    assert lines[5].split() == ["items", "6"]
    assert "missing              1  (images/tangled_loops_00005.png)" in lines
    assert "accuracy         0.333  (95% CI 0.097-0.700; missing and unparsable count as wrong)" in lines
    assert "answered         0.400  (accuracy over the 5 items with a reply)" in lines
    assert "mean abs error   0.750  (over 4 parsed)" in lines
    assert "off by one       0.250  (share of parsed)" in lines
    assert "over / under     1 / 1" in lines
    assert "  5      2        1     0.500" in lines
    assert " 11      1        0     0.000" in lines


def test_format_report_shortens_a_long_missing_list(tmp_path):
    text = format_report(evaluate_predictions(RECORDS, write_lines(tmp_path, [])))
    assert "... 1 more)" in text
    assert "tangled_loops_00005.png" not in text
    assert "n/a" in text  # nothing parsed: no error figures


def test_format_report_accepts_a_json_round_trip(mixed_predictions):
    report = json.loads(json.dumps(evaluate_predictions(RECORDS, mixed_predictions)))
    assert " 11      1        0     0.000" in format_report(report)


# ---------------------------------------------------------------------------
# The command line and the report (issue 18), on a tiny hand-made dataset
# ---------------------------------------------------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHA = ["a" * 64, "b" * 64, "c" * 64, "d" * 64, "e" * 64]
TINY = [  # answers 3, 3, 4, 4, 5; crossings 1, 2, 3, 4, 10
    {"image": f"images/tangled_loops_0000{i}.png", "index": i, "answer": answer, "seed": 11,
     "num_crossings": crossings, "pixel_sha256": SHA[i]}
    for i, (answer, crossings) in enumerate([(3, 1), (3, 2), (4, 3), (4, 4), (5, 10)])
]
# Right, over by one, right, unparsable; item 4 (answer 5) missing.
TINY_REPLIES = ["Answer: 3", "I count 4 loops.", "four", "I cannot tell."]


def write_dataset(folder, records=TINY, data=True):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if data:
        (folder / "data.json").write_text(json.dumps({
            "task": "tangled_loops", "generator_version": "9.9.9",
            "config": {"n": len(records), "seed": 11, "original_shapes": False, "answers": "equal"},
            "samples": records}, indent=1), encoding="utf-8")
    return folder


def write_predictions(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
                    encoding="utf-8")
    return path


@pytest.fixture
def tiny(tmp_path):
    dataset = write_dataset(tmp_path / "data")
    predictions = write_predictions(tmp_path / "predictions.jsonl", [
        {"index": i, "response": reply} for i, reply in enumerate(TINY_REPLIES)])
    return dataset, predictions


def evaluate_cli(*args, prog=None):
    command = [sys.executable, str(ROOT / (prog or "scoring.py")), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_an_empty_predictions_file_is_graded_with_a_warning_line(tiny, tmp_path):
    dataset, _ = tiny
    empty = write_predictions(tmp_path / "empty.jsonl", [])
    result = evaluate_cli("--evaluate", empty, "--dataset", dataset)
    assert result.returncode == 0 and "missing" in result.stdout
    assert result.stderr.splitlines() == [
        f"scoring.py: warning: {empty} holds no predictions: every item is graded as missing"]


def test_every_figure_of_the_tiny_report_checked_by_hand(tiny):
    dataset, predictions = tiny
    report = evaluate_predictions(scoring.load_records(dataset), predictions, dataset)
    assert report["dataset"] == {"folder": str(dataset), "generator_version": "9.9.9", "seed": 11, "n": 5,
                                 "mode": "budgeted", "answers": "equal"}
    assert (report["n_items"], report["n_predicted"], report["n_missing"], report["n_correct"]) == (5, 4, 1, 2)
    assert report["confusion"] == {3: {3: 1, 4: 1}, 4: {4: 1, "none": 1}, 5: {"missing": 1}}
    assert report["bias"] == pytest.approx(1 / 3)  # errors 0, +1, 0 over the three parsed replies
    assert report["mean_abs_error"] == pytest.approx(1 / 3)
    assert report["baseline_constant"] == {"answer": 3, "accuracy": 0.4}  # 3 and 4 tie at 2 of 5: the smaller
    assert report["chance"] == pytest.approx(1 / 3)
    # Quartile edges of crossings [1, 2, 3, 4, 10] are 2, 3, 4; right: items 0 and 2.
    assert report["per_crossings"] == [
        {"crossings": [1, 1], "n_items": 1, "n_correct": 1, "accuracy": 1.0},
        {"crossings": [2, 2], "n_items": 1, "n_correct": 0, "accuracy": 0.0},
        {"crossings": [3, 3], "n_items": 1, "n_correct": 1, "accuracy": 1.0},
        {"crossings": [4, 10], "n_items": 2, "n_correct": 0, "accuracy": 0.0},
    ]


def test_json_report_carries_confusion_and_baselines_with_string_keys(tiny):
    dataset, predictions = tiny
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["confusion"] == {"3": {"3": 1, "4": 1}, "4": {"4": 1, "none": 1}, "5": {"missing": 1}}
    assert report["baseline_constant"] == {"answer": 3, "accuracy": 0.4}
    assert report["dataset"]["generator_version"] == "9.9.9"
    assert format_report(report) == evaluate_cli("--evaluate", predictions, "--dataset", dataset).stdout.rstrip("\n")


def test_text_report_shows_the_dataset_baselines_crossings_and_confusion(tiny):
    dataset, predictions = tiny
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"dataset        {dataset}  (generator 9.9.9, seed 11, n 5, mode budgeted)"
    assert "bias            +0.333  (mean signed error: + counts too many)" in lines
    assert "best constant    0.400  (always answering 3)" in lines
    assert "chance           0.333  (1 / 3 distinct answers)" in lines
    assert f"gist floor       {scoring.GIST_FLOOR['exact']:.3f}  (a thumbnail CNN reaches " in "\n".join(lines)
    assert "     4-10      2        0     0.000" in lines
    # Every true answer has its column, so the diagonal is whole even where no reply said 5.
    header = lines.index("truth     3    4    5 none missing   (rows: truth, columns: reading)")
    assert lines[header + 1:] == ["    3     1    1    .    .       .",
                                  "    4     .    1    .    1       .",
                                  "    5     .    .    .    .       1"]


def test_the_readme_quotes_the_gist_floor_scoring_holds():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    floor = scoring.GIST_FLOOR
    quoted = (f"a thumbnail CNN reaches {round(100 * floor['exact'])} % exact ({round(100 * floor['within_one'])} % "
              f"within one) on {floor['thumbnail_px']} px")
    assert quoted in " ".join(readme.split())


def test_a_dataset_without_data_json_is_unknown(tmp_path):
    dataset = write_dataset(tmp_path / "data", data=False)
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": 0, "response": "3"}])
    report = evaluate_predictions(scoring.load_records(dataset), predictions, dataset)
    assert report["dataset"] == {"folder": str(dataset), "generator_version": "unknown", "seed": "unknown",
                                 "n": "unknown", "mode": "unknown"}


def test_report_dir_writes_four_files_atomically_and_keeps_foreign_ones(tiny, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    dataset, predictions = tiny
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    (report_dir / "notes.txt").write_text("mine")
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--report-dir", report_dir)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in report_dir.iterdir()) == [
        "accuracy_by_count.png", "confusion.png", "notes.txt", "per_item.jsonl", "report.txt"]
    assert (report_dir / "notes.txt").read_text() == "mine"
    assert (report_dir / "report.txt").read_text(encoding="utf-8") == result.stdout
    rows = [json.loads(line) for line in (report_dir / "per_item.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [
        {"image": TINY[0]["image"], "answer": 3, "predicted": 3, "correct": True, "reply_tail": "Answer: 3"},
        {"image": TINY[1]["image"], "answer": 3, "predicted": 4, "correct": False, "reply_tail": "I count 4 loops."},
        {"image": TINY[2]["image"], "answer": 4, "predicted": 4, "correct": True, "reply_tail": "four"},
        {"image": TINY[3]["image"], "answer": 4, "predicted": None, "correct": False, "reply_tail": "I cannot tell."},
        {"image": TINY[4]["image"], "answer": 5, "predicted": None, "correct": False, "reply_tail": None},
    ]
    for name in ("accuracy_by_count.png", "confusion.png"):
        with Image.open(report_dir / name) as image:
            assert image.format == "PNG" and image.width > 100 and image.height > 100
    before = {p.name: p.read_bytes() for p in report_dir.iterdir()}
    assert evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--report-dir", report_dir).returncode == 0
    assert {p.name: p.read_bytes() for p in report_dir.iterdir()} == before  # reruns are byte-identical


# The title's width as drawn by Pillow's default font: FreeType's, and the bitmap one (6 px a character).
TITLE_WIDTHS_PX = [264, 342]


@pytest.mark.parametrize("title_px", TITLE_WIDTHS_PX)
@pytest.mark.parametrize("n_values", [1, 4, 7])
def test_the_accuracy_plot_title_fits_whatever_the_number_of_answers(n_values, title_px):
    layout = scoring.accuracy_plot_layout(n_values, title_px)
    assert layout.left + title_px <= layout.right < layout.width  # the title ends before the grid does
    assert layout.left + layout.bar_px * n_values <= layout.right  # and so do the bars


def test_the_accuracy_plot_for_seven_answers_keeps_its_size():
    layout = scoring.accuracy_plot_layout(7, TITLE_WIDTHS_PX[0])
    assert (layout.width, layout.height) == (378, 330)  # as wide as its bars, as before the title set a minimum


def test_the_drawn_accuracy_plot_title_is_not_cut_off():
    pytest.importorskip("PIL")
    from PIL import ImageChops
    per_n = {n: {"n_items": 2, "n_correct": 1, "accuracy": 0.5} for n in (3, 4, 5, 6)}
    image = scoring.plot_accuracy_by_count(per_n, 0.25)
    title_band = image.crop((0, 0, image.width, 26))  # above the 1.00 grid line: the title only
    ink = ImageChops.invert(title_band).getbbox()  # white is 0 once inverted: the box of the title's ink
    assert ink is not None and ink[2] <= image.width - 10


def test_reply_tail_is_the_last_200_characters(tiny, tmp_path):
    dataset, _ = tiny
    reply = "x" * 500 + " Answer: 3"
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": 0, "response": reply}])
    _, rows = scoring.grade(scoring.load_records(dataset), predictions, dataset)
    assert rows[0]["reply_tail"] == reply[-200:] and len(rows[0]["reply_tail"]) == 200


# --- no silent wrong dataset

@pytest.mark.parametrize("field, value", [("pixel_sha256", "f" * 64), ("seed", 12), ("answer", 9), ("answer", "9")])
def test_a_passed_through_field_from_another_dataset_stops_the_run(tiny, tmp_path, field, value):
    dataset, _ = tiny
    rows = [{"index": i, "response": "3", **{f: TINY[i][f] for f in ("pixel_sha256", "seed", "answer")}}
            for i in range(3)]
    rows[2][field] = value
    predictions = write_predictions(tmp_path / "p.jsonl", rows)
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"scoring.py: error: {predictions} line 3: {field} does not match {TINY[2]['image']} "
                             f"in {dataset}: graded against the wrong dataset?\n")


def test_matching_passed_through_fields_grade(tiny, tmp_path):
    dataset, _ = tiny
    rows = [{"index": 0, "response": "3", "pixel_sha256": SHA[0].upper(), "seed": "11", "answer": "3"}]
    report = evaluate_predictions(TINY, write_predictions(tmp_path / "p.jsonl", rows), dataset)
    assert report["n_correct"] == 1


# --- predictions straight from a harness

def harness_sample(i, reply, with_doc):
    """A sample as lmms-eval's evaluator logs it for this task (utils.process_results' metrics merged in)."""
    record = TINY[i]
    item = {"answer": record["answer"], "predicted": extract_answer(reply), "index": i,
            "pixel_sha256": record["pixel_sha256"], "seed": record["seed"]}
    sample = {"doc_id": i, "target": str(record["answer"]), "filtered_resps": [reply], "resps": [[reply]],
              "exact_match": float(item["predicted"] == record["answer"]),
              "mean_abs_error": item, "off_by_one": item, "unparsable": item, "accuracy_by_count": item}
    if with_doc:  # older releases keep the doc, without its keys holding "image"
        sample["doc"] = {k: v for k, v in record.items() if "image" not in k}
    return sample


@pytest.mark.parametrize("layout", ["jsonl", "json list", "json logs", "json list, one line", "json logs, one line"])
def test_lmms_eval_log_samples_are_graded(tiny, tmp_path, layout):
    dataset, _ = tiny
    samples = [harness_sample(i, reply, with_doc=layout != "jsonl") for i, reply in enumerate(TINY_REPLIES)]
    if layout == "jsonl":
        path = write_predictions(tmp_path / "2025_samples_tangled_loops.jsonl", samples)
    else:
        document = samples if layout.startswith("json list") else {"args": {}, "logs": samples}
        path = tmp_path / "samples_tangled_loops.json"
        # json.dump without indent writes the whole document on one line, like a JSONL file of one line.
        path.write_text(json.dumps(document, indent=None if "one line" in layout else 2), encoding="utf-8")
    report = evaluate_predictions(TINY, path, dataset)
    assert report["confusion"] == {3: {3: 1, 4: 1}, 4: {4: 1, "none": 1}, 5: {"missing": 1}}


def test_lmms_eval_sample_without_identity_falls_back_to_doc_id_and_checks_target(tiny, tmp_path):
    dataset, _ = tiny
    sample = {"doc_id": 1, "target": "3", "filtered_resps": ["Answer: 3"]}
    assert evaluate_predictions(TINY, write_predictions(tmp_path / "a.jsonl", [sample]))["n_correct"] == 1
    wrong = write_predictions(tmp_path / "b.jsonl", ["", {**sample, "target": "4"}])
    with pytest.raises(ValueError, match=r"b.jsonl line 2: answer does not match .*00001.png"):
        evaluate_predictions(TINY, wrong, dataset)


@pytest.mark.parametrize("delimiter, suffix", [(",", ".csv"), ("\t", ".tsv"), ("\t", ".txt")])
def test_vlmevalkit_tables_are_graded(tiny, tmp_path, delimiter, suffix):
    dataset, _ = tiny
    path = tmp_path / f"model_TangledLoops{suffix}"
    lines = [delimiter.join(["index", "question", "answer", "prediction"])]
    for i, reply in enumerate(TINY_REPLIES):
        lines.append(delimiter.join([str(i), "How many?", str(TINY[i]["answer"]), f'"{reply}, really"']))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = evaluate_predictions(TINY, path, dataset)
    assert report["confusion"] == {3: {3: 1, 4: 1}, 4: {4: 1, "none": 1}, 5: {"missing": 1}}


def test_a_table_reply_longer_than_the_csv_modules_field_limit_is_read(tiny, tmp_path):
    dataset, _ = tiny
    limit = csv.field_size_limit()
    path = tmp_path / "long.tsv"
    path.write_text("index\tprediction\n0\t" + "thinking " * 30_000 + "so the answer is 3\n", encoding="utf-8")
    report = evaluate_predictions(TINY, path, dataset)
    assert (report["n_predicted"], report["n_correct"]) == (1, 1)
    assert csv.field_size_limit() == limit  # the module's limit is left as it was


def test_vlmevalkit_table_with_the_wrong_answers_stops(tiny, tmp_path):
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text("index,answer,prediction\n0,3,3\n1,7,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"p.csv line 3: answer does not match"):
        evaluate_predictions(TINY, path, dataset)


def test_a_table_with_two_prediction_columns_stops(tiny, tmp_path):
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text("index,prediction,prediction\n0,3,4\n", encoding="utf-8")  # which holds the replies?
    with pytest.raises(ValueError, match=r"p.csv line 1: column\(s\) \['prediction'\] appear more than once"):
        evaluate_predictions(TINY, path, dataset)


@pytest.mark.parametrize("prog, generation", [("scoring.py", False), ("creation.py", True)])
def test_evaluation_flags_without_evaluate_name_a_generation_only_from_creation_py(prog, generation, capsys):
    with pytest.raises(SystemExit):
        scoring.main(["--json"], prog=prog)
    assert ("a generation writes into --out" in capsys.readouterr().err) == generation


def test_an_empty_predictions_path_is_not_offered_the_current_folder(capsys):
    with pytest.raises(SystemExit):
        scoring.main(["--evaluate", ""])
    err = capsys.readouterr().err
    assert "is empty (an unset shell variable?)" in err and "current folder" not in err


# --- every malformed input: exit 2, one line naming the file and the line, no traceback

DEEP = "[" * 1000 + "]" * 1000
BAD_ANNOTATIONS = {
    "no answer": ({"image": "images/a.png", "index": 1}, "line 2: the record has no 'answer'"),
    "no image": ({"index": 1, "answer": 3}, "line 2: the record has no 'image'"),
    "a list": ([1, 2], "line 2: expected a JSON object, got list"),
    "deep": (DEEP, "line 2: not a JSON record (nested too deeply)"),
    "huge index": ('{"image": "images/b.png", "answer": 3, "index": ' + "1" * 1_000_000 + "}",
                   "line 2: not a JSON record (Exceeds the limit"),
    "duplicate": (TINY[0], "line 2: repeats image 'images/tangled_loops_00000.png' (first on line 1)"),
    "bad utf-8": (b'{"image": "images/\xff.png", "index": 1, "answer": 3}', "line 2: not UTF-8 text (byte 0xff)"),
}
BAD_PREDICTIONS = {
    "a list": ([0, "3"], "line 2: expected a JSON object, got list"),
    "deep": (DEEP, "line 2: malformed JSON (nested too deeply)"),
    "deep inside": ('{"index": 1, "response": "3", "x": ' + DEEP + "}", "line 2: malformed JSON (nested too deeply)"),
    "huge index": ('{"index": ' + "1" * 1_000_000 + ', "response": "3"}', "line 2: malformed JSON (Exceeds the limit"),
    "duplicate": ({"index": 0, "response": "4"}, "line 2: duplicate prediction for 'images/tangled_loops_00000.png' "
                                                  "(first given on line 1)"),
    "bad utf-8": (b'{"index": 1, "response": "\xc3("}', "line 2: not UTF-8 text (byte 0xc3)"),
}


def raw_line(value):
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8")


def assert_one_line_error(result, path, message):
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"scoring.py: error: {path}")
    assert message in result.stderr and len(result.stderr) < 400


@pytest.mark.parametrize("case", sorted(BAD_ANNOTATIONS))
def test_a_malformed_annotation_is_one_line(tmp_path, case):
    dataset = write_dataset(tmp_path / "data", TINY[:1])
    value, message = BAD_ANNOTATIONS[case]
    path = dataset / "annotations.jsonl"
    path.write_bytes(path.read_bytes() + raw_line(value) + b"\n")
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": 0, "response": "3"}])
    assert_one_line_error(evaluate_cli("--evaluate", predictions, "--dataset", dataset), f"{path}, {message}", "")


@pytest.mark.parametrize("case", sorted(BAD_PREDICTIONS))
def test_a_malformed_prediction_is_one_line(tiny, tmp_path, case):
    dataset, _ = tiny
    value, message = BAD_PREDICTIONS[case]
    path = tmp_path / "p.jsonl"
    path.write_bytes(raw_line({"index": 0, "response": "3"}) + b"\n" + raw_line(value) + b"\n")
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), f"{path} {message}", "")


@pytest.mark.parametrize("content, message", [
    ("index,prediction\n0,3\n1,3,extra\n", "line 3: 3 cells, the header has 2"),
    ("index,prediction\n" + "1" * 5000 + ",3\n", "line 2: unknown index '1111"),  # past int()'s digit limit
    ("index,prediction\n" + "1" * 1_000_000 + ",3\n", "line 2: unknown index '1111"),  # past csv's field limit
    ("question,prediction\nhow many,3\n", "line 1: a prediction table needs"),
])
def test_a_malformed_table_row_is_one_line(tiny, tmp_path, content, message):
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text(content, encoding="utf-8")
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), f"{path} {message}", "")


@pytest.mark.parametrize("sample, message", [
    ({"doc_id": 0, "filtered_resps": [[["deep"]]] * 0}, "line 1: no reply text"),
    ({"doc_id": "0", "filtered_resps": ["3"]}, "line 1: the sample names no item"),
    ({"doc_id": 9, "filtered_resps": ["3"]}, "line 1: doc_id 9 is past the dataset's 5 records"),
])
def test_a_malformed_harness_sample_is_one_line(tiny, tmp_path, sample, message):
    dataset, _ = tiny
    path = write_predictions(tmp_path / "s.jsonl", [sample])
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), f"{path} {message}", "")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    records = [{"image": f"images/tangled_loops_{i:05d}.png", "index": i, "answer": 3} for i in range(5000)]
    dataset = write_dataset(tmp_path / "data", records)
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": 0, "response": "3"}])  # 4,999 missing: ~200 KB
    result = subprocess.run(
        f'"{sys.executable}" "{ROOT / "scoring.py"}" --evaluate "{predictions}" --dataset "{dataset}" --json | head -1',
        shell=True, capture_output=True, text=True, timeout=120)
    assert result.stdout == "{\n"
    assert result.stderr == ""


def test_generation_flags_are_refused_in_one_line(tiny):
    dataset, predictions = tiny
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--n", "5", "--seed=3", "--overlays")
    assert result.returncode == 2
    assert result.stderr == ("scoring.py: error: unknown flags: grading takes only --evaluate PREDICTIONS, "
                             "--dataset, --strict, --json and --report-dir, not --n, --seed, --overlays\n")


@pytest.mark.parametrize("argv, shown", [
    (["--evalute", "p.jsonl"], "unknown flag --evalute (did you mean --evaluate?)"),  # not "--evaluate is required"
    (["--evaluate", "p.jsonl", "--stict"], "unknown flag --stict (did you mean --strict?)"),
    (["--evaluate", "p.jsonl", "--dataset", ".", "--report_dir", "r"],
     "unknown flag --report_dir (did you mean --report-dir?)"),
])
def test_an_unknown_flag_is_named_as_such(argv, shown, capsys):
    with pytest.raises(SystemExit) as stop:
        scoring.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("scoring.py: error: unknown flag: grading takes only --evaluate PREDICTIONS")
    assert err.endswith(f", not {shown.removeprefix('unknown flag ')}\n") and err.count("\n") == 1


def test_help_says_a_prediction_may_name_its_item_by_index():
    help_text = " ".join(scoring.build_parser().format_help().split())  # as wrapped at any terminal width
    assert '"index": N may stand for "image", or both if they agree' in help_text


def test_creation_py_forwards_evaluation_with_its_own_name(tiny, tmp_path):
    dataset, predictions = tiny
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--json", prog="creation.py")
    assert result.returncode == 0 and json.loads(result.stdout)["n_correct"] == 2
    result = evaluate_cli("--eval", tmp_path / "nothing.jsonl", "--dataset", dataset, prog="creation.py")
    assert result.returncode == 2 and result.stderr.startswith("creation.py: error: ")
    assert "nothing.jsonl: No such file or directory" in result.stderr
    result = evaluate_cli("--report-dir", tmp_path / "r", prog="creation.py")
    assert result.returncode == 2 and "apply to --evaluate only" in result.stderr
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--strict", "--json", prog="creation.py")
    assert result.returncode == 0 and json.loads(result.stdout)["reading"] == "strict"


# --- scoring.py needs the standard library only

BLOCKED = ("numpy", "scipy", "PIL", "tqdm", "skimage", "creation")
STDLIB_ONLY = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, {str(ROOT)!r})
"""


def run_stdlib_only(code):
    # -I -S: no site-packages, no PYTHONPATH, no current folder; the finder also refuses the heavy packages.
    return subprocess.run([sys.executable, "-I", "-S", "-c", STDLIB_ONLY + code],
                          capture_output=True, text=True, timeout=120)


def test_scoring_imports_and_grades_with_the_standard_library_only(tiny):
    dataset, predictions = tiny
    result = run_stdlib_only(f"""
for name in {BLOCKED!r}:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit("the test cannot fail: " + name + " imports")
import scoring
assert scoring.extract_answer("Answer: 7") == 7
raise SystemExit(scoring.main(["--evaluate", {str(predictions)!r}, "--dataset", {str(dataset)!r}, "--json"]))
""")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n_correct"] == 2


def test_report_dir_without_pillow_is_one_line_and_writes_nothing(tiny, tmp_path):
    dataset, predictions = tiny
    report_dir = tmp_path / "reports"
    result = run_stdlib_only(f"""
import scoring
raise SystemExit(scoring.main(["--evaluate", {str(predictions)!r}, "--dataset", {str(dataset)!r},
                               "--report-dir", {str(report_dir)!r}]))
""")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("scoring.py: error: --report-dir draws its plots with Pillow, which is not installed "
                             "(pip install pillow)\n")
    assert not report_dir.exists()


def test_a_null_response_is_an_unparsable_reply_not_bad_input(tmp_path):
    """Harnesses log a failed request as a null reply: it counts as wrong and unparsable, the run goes on."""
    records = [{"image": "images/a.png", "index": 0, "answer": 7}, {"image": "images/b.png", "index": 1, "answer": 5}]
    path = tmp_path / "p.jsonl"
    path.write_text('{"index": 0, "response": null}\n{"index": 1, "response": "Answer: 5"}\n', encoding="utf-8")
    report = scoring.evaluate_predictions(records, str(path))
    assert (report["n_unparsed"], report["n_correct"], report["n_missing"]) == (1, 1, 0)


def test_the_confusion_matrix_has_a_column_for_every_true_answer():
    """With no reply of 5 the diagonal cell for truth 5 must still be there, at zero."""
    confusion = scoring.confusion_matrix([(5, 6), (6, 6), (7, None)])
    assert scoring.confusion_columns(confusion) == [5, 6, 7, "none"]


# --- damaged datasets, line endings, one-line documents, report targets, CSV quotes

@pytest.mark.parametrize("layout", ["config n", "num_samples", "export marker", "extra record"])
def test_an_annotations_file_with_another_count_than_the_dataset_states_stops(tmp_path, layout):
    """A copy cut short would otherwise grade its first records alone, n 5 in the header and accuracy over 3."""
    dataset = write_dataset(tmp_path / "data", TINY[:4] if layout == "extra record" else TINY[:3])
    head = dataset / "data.json"
    if layout == "extra record":
        head.write_text(json.dumps({"config": {"n": 3}}), encoding="utf-8")
    else:
        config = {"n": 5} if layout == "config n" else {}
        head.write_text(json.dumps({"config": config, "num_samples": 5}), encoding="utf-8")
    if layout == "export marker":  # an export has no data.json; its marker file states the count
        head = head.rename(dataset / "tangled_loops_export.json")
    stated, held = (3, 4) if layout == "extra record" else (5, 3)
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": i, "response": "3"} for i in range(3)])
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset)
    assert_one_line_error(result, dataset / "annotations.jsonl",
                          f"annotations.jsonl holds {held} records but {head} says the dataset has {stated}: "
                          "the dataset is incomplete or damaged; regenerate it")


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_json_lines_end_at_newline_only(tmp_path, separator):
    """str.splitlines() also splits at these; json.dumps(ensure_ascii=False) writes them raw inside a string."""
    records = [{**TINY[0], "question": f"How many{separator}loops?"}, TINY[1]]
    dataset = write_dataset(tmp_path / "data", records)
    path = tmp_path / "p.jsonl"
    path.write_bytes("".join(json.dumps({"index": i, "response": f"Hmm{separator}Answer: 3"}, ensure_ascii=False)
                             + "\r\n" for i in range(2)).encode("utf-8"))
    report = evaluate_predictions(scoring.load_records(dataset), path, dataset)
    assert (report["n_items"], report["n_predicted"], report["n_correct"]) == (2, 2, 2)


def test_a_cut_short_json_document_with_a_line_separator_names_its_last_line(tiny, tmp_path):
    dataset, _ = tiny
    path = tmp_path / "samples.json"
    path.write_text('[\n{"doc_id": 0, "filtered_resps": ["Hmm\u2028 Answer: 3"]},\n', encoding="utf-8")
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), f"{path} line 2: malformed JSON", "")


def test_report_dir_refuses_to_replace_the_predictions_file(tiny, tmp_path):
    dataset, predictions = tiny
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    graded = report_dir / "per_item.jsonl"
    graded.write_bytes(predictions.read_bytes())
    (tmp_path / "link.jsonl").symlink_to(graded)
    for named in (graded, report_dir / ".." / "reports" / "per_item.jsonl", tmp_path / "link.jsonl"):
        result = evaluate_cli("--evaluate", named, "--dataset", dataset, "--report-dir", report_dir)
        assert_one_line_error(result, report_dir / "per_item.jsonl", "is the predictions file being graded")
        assert graded.read_bytes() == predictions.read_bytes()
        assert sorted(p.name for p in report_dir.iterdir()) == ["per_item.jsonl"]


def test_a_folder_at_a_report_file_path_stops_before_any_file_is_written(tiny, tmp_path):
    dataset, predictions = tiny
    report_dir = tmp_path / "reports"
    (report_dir / "confusion.png").mkdir(parents=True)
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--report-dir", report_dir)
    assert_one_line_error(result, report_dir / "confusion.png", "a folder stands where --report-dir writes")
    assert sorted(p.name for p in report_dir.iterdir()) == ["confusion.png"]


def test_a_failed_atomic_write_names_its_target_not_the_temporary(tmp_path):
    target = tmp_path / "confusion.png"
    target.mkdir()
    with pytest.raises(OSError) as failure:
        scoring._write_atomic(target, b"png")
    assert failure.value.filename == str(target) and scoring._os_message(failure.value).startswith(f"{target}: ")
    assert [p.name for p in tmp_path.iterdir()] == ["confusion.png"]


@pytest.mark.parametrize("rows, message", [
    # to the end of the file: csv's strict mode stops at the quote that never closes
    (['3,"I count ""4 loops. Answer: 4', "4,Answer: 5"], "line 5: a quoted cell that opens in this row runs on to line 6"),
    # into a later quoted cell, whose opening quote closes the runaway one
    (['3,"I count ""4 loops. Answer: 4', '4,"Answer: 5"'], "line 5: a quoted cell that opens in this row runs on"),
])
def test_an_unbalanced_quote_in_a_table_stops_naming_its_row(tiny, tmp_path, rows, message):
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text("index,prediction\n0,Answer: 3\n1,3\n2,4\n" + "\n".join(rows) + "\n", encoding="utf-8")
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), f"{path} {message}", "")


def test_multi_line_quoted_replies_are_read(tiny, tmp_path):
    """A quoted reply over several lines is plain CSV, also when a line of it starts like a row of the file."""
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text('index,prediction\n0,"Loops:\n1, the big one\n2, the small one\nAnswer: 3"\n1,"Hmm,\n""4"""\n'
                    "2,four\n", encoding="utf-8")
    report = evaluate_predictions(TINY, path, dataset)
    assert report["confusion"] == {3: {3: 1, 4: 1}, 4: {4: 1, "missing": 1}, 5: {"missing": 1}}


def test_a_reply_line_that_looks_like_the_row_of_a_missing_item_is_still_a_reply(tiny, tmp_path):
    """A partial table is valid: "3, no wait" inside a quoted reply is text, although no row names item 3."""
    dataset, _ = tiny
    path = tmp_path / "p.csv"
    path.write_text('index,prediction\n0,"Counting:\n3, no wait\nAnswer: 3"\n1,3\n', encoding="utf-8")
    report = evaluate_predictions(TINY, path, dataset)
    assert (report["n_correct"], report["n_missing"]) == (2, 3)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_is_refused_in_one_line_not_read_forever(tiny, tmp_path):
    dataset, _ = tiny
    # Under a memory limit: without the check, reading /dev/zero ends in a MemoryError traceback (or never).
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
    command = [sys.executable, "-c", limit + "import runpy, sys; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')",
               str(ROOT / "scoring.py"), "--evaluate", "/dev/zero", "--dataset", str(dataset)]
    assert_one_line_error(subprocess.run(command, capture_output=True, text=True, timeout=120),
                          "/dev/zero", "is a device, not a file")


@pytest.mark.parametrize("damage", ["cut short", "a folder", "a pipe"])
def test_a_damaged_data_json_stops_the_run_as_its_count_cannot_be_checked(tiny, tmp_path, damage):
    dataset, predictions = tiny
    head = dataset / "data.json"
    if damage != "cut short":
        head.unlink(missing_ok=True)
        head.mkdir() if damage == "a folder" else os.mkfifo(head)  # a pipe no one writes: reading it would hang
    else:
        head.write_text('{"config": {"n": 5', encoding="utf-8")
    assert_one_line_error(evaluate_cli("--evaluate", predictions, "--dataset", dataset), head, "damaged")


def test_a_report_dir_that_is_a_file_is_refused_naming_it(tiny, tmp_path):
    dataset, predictions = tiny
    (tmp_path / "report").write_text("notes", encoding="utf-8")
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--report-dir", tmp_path / "report")
    assert result.returncode == 2 and "--report-dir" in result.stderr and "exists and is not a folder" in result.stderr
    assert (tmp_path / "report").read_text(encoding="utf-8") == "notes"


def test_a_long_whole_number_is_read_exactly_and_graded_as_a_miss():
    reply = "There are 100000000000000000000001 loops."
    assert scoring.extract_answer(reply) == 10**23 + 1
    assert scoring.score_answer(reply, 7) == 0.0
    assert scoring.extract_answer("There are " + "9" * 309 + " loops.") is None


# ---------------------------------------------------------------------------
# One prompt, the strict reading, partial runs, and predictions that cannot be read
# ---------------------------------------------------------------------------

def test_the_prompt_is_the_question_then_the_answer_format_line():
    assert scoring.evaluation_prompt("How many loops?") == (
        "How many loops?\nAnswer with a single integer in the form 'Answer: N'.")
    # The format line asks for the marker both readings take.
    assert extract_answer("Answer: 7") == scoring.extract_answer_line("Answer: 7") == 7


def test_the_report_states_the_prompt_it_assumes(tmp_path):
    dataset = write_dataset(tmp_path / "data", [dict(r, question="How many loops?") for r in TINY])
    predictions = write_predictions(tmp_path / "p.jsonl", [{"index": 0, "response": "Answer: 3"}])
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset)
    assert result.returncode == 0, result.stderr
    assert f"\nprompt         How many loops?\n               {scoring.ANSWER_FORMAT}\n" in result.stdout
    report = json.loads(evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--json").stdout)
    assert report["prompt"] == scoring.evaluation_prompt("How many loops?")


STRICT_CASES = [
    ("Answer: 7", 7),
    ("I traced every loop.\n\n**Answer:** 7", 7),
    ("I count 7 loops.\nanswer: 7.", 7),
    ("I count 7 loops. Answer: 7", 7),
    ("Final answer: **7**", 7),
    ("Answer: 7. Loop 1 is the largest.", None),  # the answer must end its line
    ("Answer: 6\nWait, one more.\nAnswer: 7", 7),  # the last answer line
    ("<think>Answer: 5</think>\nAnswer: 7", 7),
    ("Answer: 1,000", 1000),
    ("I count 7 loops.", None),
    ("The answer is 7.", None),
    ("\\boxed{7}", None),
    ("Answer: seven", None),
    ("Answer: 7 or 8", None),
    ("Answer: 7 loops", None),
    ("<think>Answer: 5", None),  # cut short
    ("Answer: " + "7" * 400, None),
]


@pytest.mark.parametrize("response, expected", STRICT_CASES)
def test_the_strict_reading_takes_only_an_answer_line(response, expected):
    assert scoring.extract_answer_line(response) == expected


def test_strict_grading_reads_only_answer_lines(tiny):
    dataset, predictions = tiny
    lenient = evaluate_predictions(TINY, predictions, dataset)
    strict = evaluate_predictions(TINY, predictions, dataset, strict=True)
    assert (lenient["n_correct"], lenient["n_unparsed"]) == (2, 1)
    assert (strict["n_correct"], strict["n_unparsed"]) == (1, 3)  # "I count 4 loops." and "four" give no line
    assert (lenient["reading"], strict["reading"]) == ("lenient", "strict")
    result = evaluate_cli("--evaluate", predictions, "--dataset", dataset, "--strict")
    assert result.returncode == 0, result.stderr
    assert 'reading        strict: only "Answer: N" ending a line counts' in result.stdout.splitlines()
    assert "correct" in result.stdout and json.loads(evaluate_cli(
        "--evaluate", predictions, "--dataset", dataset, "--strict", "--json").stdout)["n_correct"] == 1


def test_a_partial_run_reports_accuracy_over_the_answered_items(tmp_path):
    """19 replies for 500 items said 0.024 and nothing about the 19; the headline still counts the rest as wrong."""
    records = [{"image": f"images/tangled_loops_{i:05d}.png", "index": i, "answer": 5 + i % 3} for i in range(500)]
    dataset = write_dataset(tmp_path / "data", records)
    replies = [{"index": i, "response": f"Answer: {records[i]['answer'] + (i >= 12)}"} for i in range(19)]
    report = evaluate_predictions(records, write_predictions(tmp_path / "p.jsonl", replies), dataset)
    assert report["accuracy"] == pytest.approx(12 / 500) and report["n_missing"] == 481
    assert report["accuracy_answered"] == pytest.approx(12 / 19)
    assert "answered         0.632  (accuracy over the 19 items with a reply)" in format_report(report).splitlines()
    empty = evaluate_predictions(records, write_predictions(tmp_path / "none.jsonl", []), dataset)
    assert empty["accuracy_answered"] is None and "answered           n/a" in format_report(empty)


@pytest.mark.parametrize("name, head", [("preds.xlsx", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\x8f"),
                                        ("preds.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"),
                                        ("preds.csv", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\x8f")])
def test_a_spreadsheet_gets_one_line_saying_how_to_get_a_table(tiny, tmp_path, name, head):
    """VLMEvalKit writes .xlsx by default; it said "line 1: not UTF-8 text (byte 0x8f)"."""
    dataset, _ = tiny
    path = tmp_path / name
    path.write_bytes(head + bytes(range(256)) * 4)
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), path,
                          "a spreadsheet (VLMEvalKit writes .xlsx unless told otherwise): run VLMEvalKit with "
                          "PRED_FORMAT=tsv")


def test_a_folder_given_as_predictions_is_named_as_such(tiny, tmp_path):
    dataset, _ = tiny
    folder = tmp_path / "outputs"
    folder.mkdir()
    assert_one_line_error(evaluate_cli("--evaluate", folder, "--dataset", dataset), folder, "is a folder, not a file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_that_nothing_writes_is_refused_not_waited_on(tiny, tmp_path):
    dataset, _ = tiny
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    command = [sys.executable, str(ROOT / "scoring.py"), "--evaluate", str(fifo), "--dataset", str(dataset)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)  # it hung here
    assert_one_line_error(result, fifo, "is a named pipe that nothing is writing to")


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs bash for <(...)")
def test_a_pipe_that_is_being_written_is_read(tiny):
    dataset, predictions = tiny
    script = (f'"{sys.executable}" "{ROOT / "scoring.py"}" --evaluate <(sleep 1; cat "{predictions}") '
              f'--dataset "{dataset}" --json')
    result = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n_correct"] == 2


@pytest.mark.parametrize("image, shown", [
    ("tangled_loops_00002.png", "unknown image 'tangled_loops_00002.png' (did you mean "
                                "'images/tangled_loops_00002.png', or give its \"index\")"),
    ("pictures/loop.png", "unknown image 'pictures/loop.png' (expected a path relative to the dataset folder, as "
                          "in annotations.jsonl, such as 'images/tangled_loops_00000.png', or give its \"index\")"),
])
def test_an_unknown_image_shows_the_form_the_records_use(tiny, tmp_path, image, shown):
    dataset, _ = tiny
    path = write_predictions(tmp_path / "p.jsonl", [{"image": image, "response": "3"}])
    assert_one_line_error(evaluate_cli("--evaluate", path, "--dataset", dataset), path, f"line 1: {shown}")


def test_the_plots_are_titled_with_the_predictions_and_the_dataset(tiny):
    pytest.importorskip("PIL")
    from PIL import Image, ImageDraw, ImageFont
    dataset, predictions = tiny
    report = evaluate_predictions(TINY, predictions, dataset, strict=True)
    source = scoring.plot_source(report)
    assert source == "predictions.jsonl on data (seed 11, n 5), strict reading"
    font = ImageFont.load_default()
    for plot in (scoring.plot_accuracy_by_count(report["per_n"], report["chance"], source),
                 scoring.plot_confusion(report["confusion"], source)):
        expected = Image.new("RGB", plot.size, "white")
        ImageDraw.Draw(expected).text((50 if plot.height > 300 else 70, 8), source, fill=scoring.PLOT_INK, font=font)
        band = (0, 0, plot.width, 8 + scoring.TITLE_LINE_PX)  # the first title line, above the caption
        assert plot.crop(band).tobytes() == expected.crop(band).tobytes()


def test_the_confusion_shades_are_not_set_by_the_missing_column():
    """A partial run's missing column held most of every row, fading each reading towards white."""
    pytest.importorskip("PIL")
    image = scoring.plot_confusion({5: {5: 1, "missing": 99}, 6: {6: 1}})
    cell, left, top = 36, 70, 60  # columns 5, 6, missing; rows 5, 6

    def colour(row, column):
        return image.getpixel((left + column * cell + 30, top + row * cell + 30))

    assert colour(0, 0) == colour(1, 1) != (255, 255, 255)  # all of each row's replies: the same full shade
    assert colour(0, 2) == scoring.PLOT_MISSING
