"""Tests for the lmms-eval hooks in integrations/lmms_eval (lmms-eval itself not needed).

utils.py loads scoring.py from the repo root (never creation.py), so these run
against the real scorer.
"""

import importlib.util
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
