"""lmms-eval hooks for the tangled-loops task (see tangled_loops.yaml beside this file).

The task reads a Hub export of the dataset (`python creation.py --export-hub hub_loops`, or
the export uploaded to the Hub): its records carry their images embedded, so nothing is
regenerated and no environment variable says where images live. From the repository root:

    python -m lmms_eval --model qwen2_5_vl --tasks tangled_loops \
        --include_path integrations/lmms_eval --batch_size 1 --log_samples --output_path logs/

Each image is shown with scoring.evaluation_prompt: the record's question, then the answer-format
line, the same text the VLMEvalKit TSV and the dataset card carry. An image whose pixels differ
from its record's pixel_sha256 stops the run rather than being scored against another
dataset's answer.

The hooks need scoring.py (standard library only) and Pillow, never the generator. The samples
lmms-eval logs grade again, with the full report, by
`python scoring.py --evaluate <samples .jsonl or .json> --dataset hub_loops`.
"""

import hashlib
import importlib.util
import io
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


def pixel_sha256(image):
    """Hash of the decoded RGB pixels, as creation.py records it: independent of PNG encoder and storage mode."""
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


def _embedded_image(value):
    """The record's image as a PIL image: decoded by `datasets` already, or its {"bytes", "path"} when
    the column is not decoded. A path string means records without their images: refused."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict) and isinstance(value.get("bytes"), bytes):
        with Image.open(io.BytesIO(value["bytes"])) as image:
            image.load()
            return image.copy()
    raise ValueError(
        f"the record's image is {type(value).__name__}, not an embedded image: this task reads a Hub export "
        "(python creation.py --export-hub hub_loops), whose records carry their images")


def doc_to_visual(doc):
    """The record's embedded image as a one-element RGB list, the form lmms-eval models take."""
    rgb = _embedded_image(doc["image"]).convert("RGB")
    if "pixel_sha256" in doc and pixel_sha256(rgb) != doc["pixel_sha256"]:
        raise ValueError(f"record {doc.get('index')}: its image is not the one the record describes "
                         "(pixel_sha256 differs): the export is damaged; export it again")
    return [rgb]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    """scoring.evaluation_prompt of the record's question, with the yaml's per-model pre/post prompt
    around it (none by default: the prompt is the same in every harness)."""
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{scoring.evaluation_prompt(doc['question'])}{kwargs.get('post_prompt', '')}"


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
    """{"exact_match": 1.0 or 0.0, "strict_match": the same for the strict reading (only "Answer: N"
    ending a line, comparable across harnesses), <each of ITEM_METRICS>: item} for the generation in `results`."""
    predicted = scoring.extract_answer(results[0])
    strict = 1.0 if scoring.extract_answer_line(results[0]) == doc["answer"] else 0.0
    item = {"answer": doc["answer"], "predicted": predicted}
    item.update({field: doc[field] for field in ("index", *scoring.IDENTITY_FIELDS) if field in doc})
    return {"exact_match": 1.0 if predicted == doc["answer"] else 0.0, "strict_match": strict,
            **{name: item for name in ITEM_METRICS}}


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
