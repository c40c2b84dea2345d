"""Tests for the lmms-eval hooks in integrations/lmms_eval (lmms-eval itself not needed).

utils.py loads scoring.py from the repo root (never creation.py), so these run
against the real scorer.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

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


@pytest.fixture
def doc(tmp_path, monkeypatch):
    """A record as the generator writes it, with its image in a dataset folder."""
    (tmp_path / "images").mkdir()
    Image.new("L", (32, 24), 200).save(tmp_path / "images" / "tangled_loops_00000.png")
    monkeypatch.setenv("TANGLED_LOOPS_DIR", str(tmp_path))
    return {
        "image": "images/tangled_loops_00000.png",
        "index": 0,
        "question": "How many distinct closed loops are tangled together in this image?",
        "answer": 7,
    }


def test_doc_to_visual_opens_the_image_as_rgb(utils, doc):
    images = utils.doc_to_visual(doc)
    assert len(images) == 1
    assert images[0].mode == "RGB"
    assert images[0].size == (32, 24)


def test_doc_to_visual_refuses_an_image_of_another_dataset(utils, doc, tmp_path):
    """Two datasets share file names: records of one with images of the other must not be scored."""
    import creation

    with Image.open(tmp_path / doc["image"]) as image:
        doc["pixel_sha256"] = creation.pixel_sha256(image)
    assert utils.doc_to_visual(doc)[0].size == (32, 24)
    Image.new("L", (32, 24), 201).save(tmp_path / doc["image"])
    with pytest.raises(ValueError, match="not the image its record describes"):
        utils.doc_to_visual(doc)


def test_doc_to_visual_defaults_to_the_repo_root(utils, doc, tmp_path, monkeypatch):
    monkeypatch.delenv("TANGLED_LOOPS_DIR")
    monkeypatch.setattr(utils, "REPO_ROOT", str(tmp_path))
    assert utils.doc_to_visual(doc)[0].size == (32, 24)


def test_doc_to_text_adds_the_answer_format(utils, doc):
    assert utils.doc_to_text(doc) == f"{doc['question']}\n{utils.ANSWER_FORMAT}"
    assert utils.doc_to_text(doc, {"pre_prompt": "Look closely. ", "post_prompt": " Answer:"}) == (
        f"Look closely. {doc['question']} Answer:"
    )


@pytest.mark.parametrize(
    "response, score",
    [
        ("Answer: 7", 1.0),
        ("I traced them all: seven loops.", 1.0),
        ("There are 5 ... no, 7 loops", 1.0),
        ("Answer: 8", 0.0),
        ("Answer: 7 or 8", 0.0),
        ("I cannot tell.", 0.0),
    ],
)
def test_process_results_scores_the_generation(utils, doc, response, score):
    # exact_match is still a plain float per doc; the other metrics (tested below) ride beside it.
    assert utils.process_results(doc, [response])["exact_match"] == score


def test_yaml_names_hooks_that_exist():
    yaml = pytest.importorskip("yaml")
    utils = load_utils()

    class Loader(yaml.SafeLoader):
        pass

    def import_function(loader, node):
        module, name = loader.construct_scalar(node).split(".")
        assert module == "utils"
        return getattr(utils, name)

    Loader.add_constructor("!function", import_function)
    config = yaml.load((TASK_DIR / "tangled_loops.yaml").read_text(encoding="utf-8"), Loader=Loader)
    assert config["dataset_path"] == "json"
    assert config["test_split"] in config["dataset_kwargs"]["data_files"]
    for hook in ("doc_to_visual", "doc_to_text", "process_results"):
        assert callable(config[hook])
    assert config["metric_list"][0] == {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}
    metrics = {entry["metric"]: entry for entry in config["metric_list"]}
    # lmms-eval looks up each key process_results returns in metric_list (some releases fail on a stray one).
    assert set(metrics) == {"exact_match", *utils.ITEM_METRICS}
    for name in utils.ITEM_METRICS:
        assert callable(metrics[name]["aggregation"])
        assert isinstance(metrics[name]["higher_is_better"], bool)
    assert config["lmms_eval_specific_kwargs"]["default"]["post_prompt"] == f"\n{utils.ANSWER_FORMAT}"


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
