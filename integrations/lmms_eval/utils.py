"""lmms-eval hooks for the tangled-loops task (see tangled_loops.yaml beside this file).

Run from anywhere with lmms-eval installed:

    python -m lmms_eval --model qwen2_5_vl --tasks tangled_loops \
        --include_path integrations/lmms_eval --batch_size 1

Images are opened relative to the dataset folder: $TANGLED_LOOPS_DIR when set,
otherwise the repository root, where creation.py writes annotations.jsonl and
images/ by default. The records come from the yaml's data_files, so both must
name the same dataset: an image whose pixels differ from its record's
pixel_sha256 stops the run rather than being scored against another
dataset's answer (the file names of two datasets are the same).
"""

import os
import sys

from PIL import Image

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# lmms-eval loads this file by path, not as part of a package, so the scorer in
# the repo root is only importable once that folder is on sys.path.
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from creation import pixel_sha256, score_answer  # noqa: E402  (needs the sys.path entry above)

# Matches the marker extract_answer looks for first; the yaml's post_prompt
# overrides it per model.
ANSWER_FORMAT = "Answer with a single integer in the form 'Answer: N'."


def doc_to_visual(doc):
    """The record's image as a one-element RGB list, the form lmms-eval models take."""
    data_dir = os.environ.get("TANGLED_LOOPS_DIR", REPO_ROOT)
    path = os.path.join(data_dir, doc["image"])
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    if "pixel_sha256" in doc and pixel_sha256(rgb) != doc["pixel_sha256"]:
        raise ValueError(
            f"{path} is not the image its record describes (pixel_sha256 differs): the records "
            f"(data_files in tangled_loops.yaml) and the images ($TANGLED_LOOPS_DIR, now {data_dir}) "
            "must come from the same dataset folder")
    return [rgb]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    """The record's question with the pre/post prompt of the yaml (default: ANSWER_FORMAT after it)."""
    kwargs = lmms_eval_specific_kwargs or {}
    pre_prompt = kwargs.get("pre_prompt", "")
    post_prompt = kwargs.get("post_prompt", f"\n{ANSWER_FORMAT}")
    return f"{pre_prompt}{doc['question']}{post_prompt}"


def process_results(doc, results):
    """{"exact_match": 1.0 or 0.0} for the single generation in `results`."""
    return {"exact_match": score_answer(results[0], doc["answer"])}
