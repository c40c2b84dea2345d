"""Tests for the lmms-eval hooks in integrations/lmms_eval (lmms-eval itself not needed).

utils.py loads scoring.py from the repo root (never creation.py), so these run
against the real scorer.
"""

import hashlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import scoring

TASK_DIR = Path(__file__).resolve().parents[1] / "integrations" / "lmms_eval"


def load_utils():
    # lmms-eval imports utils.py by file path too (its "!function utils.x" tag).
    spec = importlib.util.spec_from_file_location("tangled_loops_lmms_utils", TASK_DIR / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def utils():
    return load_utils()


def palette_image(shade: int = 200) -> Image.Image:
    """A small palette image, as the generator writes them."""
    return Image.new("L", (32, 24), shade).convert("P")


@pytest.fixture
def doc():
    """A record as `datasets` hands it out from a Hub export: the image embedded and decoded."""
    image = palette_image()
    return {
        "image": image,
        "index": 0,
        "question": "How many distinct closed loops are tangled together in this image?",
        "answer": 7,
        "pixel_sha256": hashlib.sha256(image.convert("RGB").tobytes()).hexdigest(),
    }


def test_doc_to_visual_gives_the_embedded_image_as_rgb(utils, doc):
    images = utils.doc_to_visual(doc)
    assert len(images) == 1
    assert images[0].mode == "RGB" and images[0].size == (32, 24)


def test_doc_to_visual_reads_an_undecoded_image_column(utils, doc):
    buffer = io.BytesIO()
    doc["image"].save(buffer, format="PNG")
    doc["image"] = {"bytes": buffer.getvalue(), "path": "images/tangled_loops_00000.png"}  # Image(decode=False)
    assert utils.doc_to_visual(doc)[0].mode == "RGB"


def test_doc_to_visual_refuses_an_image_unlike_its_record(utils, doc):
    doc["image"] = palette_image(201)
    with pytest.raises(ValueError, match="record 0: its image is not the one the record describes"):
        utils.doc_to_visual(doc)


def test_doc_to_visual_refuses_a_path_instead_of_an_image(utils, doc):
    """The task used to read images/... relative to $TANGLED_LOOPS_DIR; it now reads an export only."""
    doc["image"] = "images/tangled_loops_00000.png"
    with pytest.raises(ValueError, match="not an embedded image: this task reads a Hub export"):
        utils.doc_to_visual(doc)


def test_doc_to_text_is_the_evaluation_prompt(utils, doc):
    assert utils.doc_to_text(doc) == scoring.evaluation_prompt(doc["question"])
    assert utils.doc_to_text(doc) == f"{doc['question']}\nAnswer with a single integer in the form 'Answer: N'."
    assert utils.doc_to_text(doc, {"pre_prompt": "Look closely. ", "post_prompt": " Think step by step."}) == (
        f"Look closely. {scoring.evaluation_prompt(doc['question'])} Think step by step.")


@pytest.mark.parametrize(
    "response, score, strict",
    [
        ("Answer: 7", 1.0, 1.0),
        ("I traced them all: seven loops.", 1.0, 0.0),  # the strict reading wants "Answer: N"
        ("There are 5 ... no, 7 loops", 1.0, 0.0),
        ("I count 7 loops. Answer: 7", 1.0, 1.0),
        ("Answer: 8", 0.0, 0.0),
        ("Answer: 7 or 8", 0.0, 0.0),
        ("I cannot tell.", 0.0, 0.0),
    ],
)
def test_process_results_scores_the_generation(utils, doc, response, score, strict):
    # exact_match and strict_match are plain floats per doc; the other metrics (tested below) ride beside them.
    metrics = utils.process_results(doc, [response])
    assert (metrics["exact_match"], metrics["strict_match"]) == (score, strict)


def test_yaml_reads_an_export_and_names_hooks_that_exist():
    utils = load_utils()
    config = load_config(utils)
    assert config["dataset_path"] == "hub_loops" and "dataset_kwargs" not in config  # the export, as it is
    assert config["test_split"] == "test"
    for hook in ("doc_to_visual", "doc_to_text", "process_results"):
        assert callable(config[hook])
    # The prompt is scoring's alone: no post_prompt adds a second answer-format line.
    assert "lmms_eval_specific_kwargs" not in config
    assert config["metric_list"][:2] == [
        {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True},
        {"metric": "strict_match", "aggregation": "mean", "higher_is_better": True}]
    metrics = {entry["metric"]: entry for entry in config["metric_list"]}
    # lmms-eval looks up each key process_results returns in metric_list (some releases fail on a stray one).
    assert set(metrics) == {"exact_match", "strict_match", *utils.ITEM_METRICS}
    for name in utils.ITEM_METRICS:
        assert callable(metrics[name]["aggregation"])
        assert isinstance(metrics[name]["higher_is_better"], bool)


# ---------------------------------------------------------------------------
# The metrics, called as lmms-eval calls them: process_results per doc, then
# each metric's aggregation over the list of that metric's values.

REPLIES = [(5, "Answer: 5"), (5, "Answer: 6"), (7, "I count seven loops."), (7, "No idea."), (9, "Answer: 7")]


def run_like_lmms_eval(utils, config, docs_and_replies):
    sample_metrics = {}
    for doc, reply in docs_and_replies:
        for metric, value in utils.process_results(doc, [reply]).items():
            sample_metrics.setdefault(metric, []).append(value)
    aggregations = {entry["metric"]: entry["aggregation"] for entry in config["metric_list"]}
    mean = lambda values: sum(values) / len(values)  # noqa: E731  lmms-eval's built-in "mean"
    return {metric: (mean if aggregations[metric] == "mean" else aggregations[metric])(values)
            for metric, values in sample_metrics.items()}


def load_config(utils):
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: getattr(utils, loader.construct_scalar(node).split(".")[1]))
    return yaml.load((TASK_DIR / "tangled_loops.yaml").read_text(encoding="utf-8"), Loader=Loader)


def test_metrics_aggregate_as_lmms_eval_runs_them(utils, doc):
    docs = [({**doc, "index": i, "answer": answer}, reply) for i, (answer, reply) in enumerate(REPLIES)]
    results = run_like_lmms_eval(utils, load_config(utils), docs)
    # Readings 5, 6, 7, None, 7 against 5, 5, 7, 7, 9: errors 0, +1, 0, -2 over four parsed.
    assert results["exact_match"] == pytest.approx(2 / 5)
    assert results["strict_match"] == pytest.approx(1 / 5)  # "I count seven loops." has no answer line
    assert results["mean_abs_error"] == pytest.approx(3 / 4)
    assert results["off_by_one"] == pytest.approx(1 / 4)
    assert results["unparsable"] == pytest.approx(1 / 5)
    assert results["accuracy_by_count"] == {"5": 0.5, "7": 0.5, "9": 0.0}


def test_process_results_passes_the_identity_through(utils, doc):
    doc = {**doc, "pixel_sha256": "ab" * 32, "seed": 3}
    item = utils.process_results(doc, ["Answer: 6"])["accuracy_by_count"]
    assert item == {"answer": 7, "predicted": 6, "index": 0, "pixel_sha256": "ab" * 32, "seed": 3}


def test_logged_samples_grade_again_with_evaluate(utils, doc, tmp_path):
    """A sample as lmms-eval logs it (doc dropped, metrics merged in) is read back by scoring.py --evaluate."""
    import scoring

    records = [{"image": f"images/tangled_loops_0000{i}.png", "index": i, "answer": answer, "seed": 3,
                "pixel_sha256": f"{i}" * 64} for i, (answer, _) in enumerate(REPLIES)]
    (tmp_path / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    samples = []
    for doc_id, (record, (_, reply)) in enumerate(zip(records, REPLIES)):
        metrics = utils.process_results(record, [reply])
        samples.append({"doc_id": doc_id, "target": str(record["answer"]), "filtered_resps": [reply], **metrics})
    log = tmp_path / "samples_tangled_loops.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    report = scoring.evaluate_predictions(scoring.load_records(tmp_path), log, tmp_path)
    assert (report["n_correct"], report["n_unparsed"], report["n_missing"]) == (2, 1, 0)
    records[4]["pixel_sha256"] = "f" * 64  # the same samples against another dataset
    (tmp_path / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError, match="line 5: pixel_sha256 does not match .*wrong dataset"):
        scoring.evaluate_predictions(scoring.load_records(tmp_path), log, tmp_path)


def test_the_hooks_never_import_the_generator():
    code = (f"import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('u', {str(TASK_DIR / 'utils.py')!r})\n"
            f"module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
            f"assert module.process_results({{'answer': 7}}, ['Answer: 7'])['exact_match'] == 1.0\n"
            f"print(sorted(name for name in ('creation', 'numpy', 'scipy', 'tqdm') if name in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# A real export: the hooks on a document as `datasets` loads it, and the prompt in every harness


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import creation
    import export

    root = tmp_path_factory.mktemp("exported")
    assert creation.main(["--n", "3", "--seed", "5", "--out", str(root / "loops"), "--quiet", "--workers", "1"]) == 0
    assert export.main(["--export-hub", str(root / "hub_loops"), "--dataset", str(root / "loops"), "--quiet"]) == 0
    assert export.main(["--export-vlmevalkit", str(root / "loops.tsv"), "--dataset", str(root / "loops"),
                        "--quiet"]) == 0
    return root


@pytest.fixture
def export_docs(exported, tmp_path, monkeypatch):
    """The export's test split as lmms-eval gets it (datasets.load_dataset of the folder), offline, elsewhere."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return datasets.load_dataset(str(exported / "hub_loops"), split="test", cache_dir=str(tmp_path / "cache"))


def test_the_hooks_run_on_documents_of_an_export(utils, export_docs):
    for doc in export_docs:
        (image,) = utils.doc_to_visual(doc)
        assert image.mode == "RGB" and hashlib.sha256(image.tobytes()).hexdigest() == doc["pixel_sha256"]
        assert utils.process_results(doc, [f"Answer: {doc['answer']}"])["exact_match"] == 1.0


def test_the_prompt_is_the_same_in_every_harness(utils, export_docs, exported):
    import csv

    prompts = [scoring.evaluation_prompt(doc["question"]) for doc in export_docs]
    assert [utils.doc_to_text(doc) for doc in export_docs] == prompts  # lmms-eval
    csv.field_size_limit(sys.maxsize)
    with open(exported / "loops.tsv", encoding="utf-8", newline="") as f:
        assert [row["question"] for row in csv.DictReader(f, delimiter="\t")] == prompts  # VLMEvalKit
    card = (exported / "hub_loops" / "README.md").read_text(encoding="utf-8")
    assert f"```text\n{prompts[0]}\n```" in card  # the dataset card
    records = scoring.load_records(exported / "hub_loops")
    assert scoring.assumed_prompt(records) == prompts[0]  # the report


def test_the_readme_shows_the_prompt_verbatim():
    root = Path(__file__).resolve().parents[1]
    question = json.loads((root / "data.json").read_text(encoding="utf-8"))["question"]
    assert f"```text\n{scoring.evaluation_prompt(question)}\n```" in (root / "README.md").read_text(encoding="utf-8")
