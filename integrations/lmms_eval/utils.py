"""lmms-eval hooks for the tangled-loops task (see tangled_loops.yaml beside this file).

Run from anywhere with lmms-eval installed:

    python -m lmms_eval --model qwen2_5_vl --tasks tangled_loops \
        --include_path integrations/lmms_eval --batch_size 1 --log_samples --output_path logs/

Images are opened relative to the dataset folder: $TANGLED_LOOPS_DIR when set,
otherwise the repository root, where creation.py writes annotations.jsonl and
images/ by default. The records come from the yaml's data_files, so both must
name the same dataset: an image whose pixels differ from its record's
pixel_sha256 stops the run rather than being scored against another
dataset's answer (the file names of two datasets are the same).

The hooks need scoring.py (standard library only) and Pillow, never the
generator. The samples lmms-eval logs can be graded again, with the full
report, by `python scoring.py --evaluate <samples .jsonl or .json> --dataset DIR`.
"""

import hashlib
import importlib.util
import os

from PIL import Image

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_scoring():
    """scoring.py from the repo root, loaded by its path: lmms-eval imports this file by path, outside
    any package, and putting the repo root on sys.path would expose creation.py and tests/ too."""
    spec = importlib.util.spec_from_file_location("tangled_loops_scoring", os.path.join(REPO_ROOT, "scoring.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scoring = _load_scoring()

# Matches the marker extract_answer looks for first; the yaml's post_prompt
# overrides it per model.
ANSWER_FORMAT = "Answer with a single integer in the form 'Answer: N'."


def pixel_sha256(image):
    """Hash of the decoded RGB pixels, as creation.py records it: independent of PNG encoder and storage mode."""
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


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


# ---------------------------------------------------------------------------
# Metrics. lmms-eval calls process_results once per doc and then, for each
# metric of the yaml's metric_list, its aggregation on the list of that
# metric's per-doc values. exact_match is a float per doc (aggregated by
# lmms-eval's own mean); the other metrics need the answer and the reading, so
# their per-doc value is one "item" dict, which also carries the record's
# index, pixel_sha256 and seed: newer lmms-eval releases drop "doc" from the
# samples they log, and scoring.py --evaluate reads the identity from there.

ITEM_METRICS = ("mean_abs_error", "off_by_one", "unparsable", "accuracy_by_count")


def process_results(doc, results):
    """{"exact_match": 1.0 or 0.0, <each of ITEM_METRICS>: item} for the single generation in `results`."""
    predicted = scoring.extract_answer(results[0])
    item = {"answer": doc["answer"], "predicted": predicted}
    item.update({field: doc[field] for field in ("index", *scoring.IDENTITY_FIELDS) if field in doc})
    return {"exact_match": 1.0 if predicted == doc["answer"] else 0.0, **{name: item for name in ITEM_METRICS}}


def _pairs(items):
    return [(item["answer"], item["predicted"]) for item in items]


def mean_abs_error(items):
    """Mean |reading - answer| over the replies that give a count (None if none does)."""
    return scoring.error_figures(_pairs(items))["mean_abs_error"]


def off_by_one(items):
    """Share of the replies giving a count that are one off (None if none gives one)."""
    return scoring.error_figures(_pairs(items))["off_by_one"]


def unparsable(items):
    """Share of the replies that commit to no count."""
    return scoring.error_figures(_pairs(items))["n_unparsed"] / len(items)


def accuracy_by_count(items):
    """{"N": accuracy} per true answer N (string keys, as lmms-eval writes them to JSON)."""
    return {str(n): row["accuracy"] for n, row in scoring.accuracy_by_count(_pairs(items)).items()}
