"""Start-up: what creation.py loads before it has anything to draw.

The spline fitter, the k-d tree and the font are imported inside the
functions that use them, so `--help`, `--merge` and a rerun that keeps every
image load none of scipy.interpolate, scipy.spatial or PIL.ImageFont.
Each check runs in a fresh interpreter, whose sys.modules is its own.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRAWING_ONLY = ("scipy.interpolate", "scipy.spatial", "PIL.ImageFont")


def loaded_after(code: str) -> list[str]:
    """Which of DRAWING_ONLY a fresh interpreter has imported after running code (with creation importable)."""
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{code}\n"
              f"print('loaded:', *(name for name in {DRAWING_ONLY!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return result.stdout.splitlines()[-1].split()[1:]  # the last line: --help prints its own before it


def test_import_loads_no_spline_tree_or_font():
    assert loaded_after("import creation") == []


def test_help_loads_no_spline_tree_or_font():
    assert loaded_after("import creation\ntry:\n    creation.main(['--help'])\nexcept SystemExit:\n    pass") == []


def test_a_rerun_that_keeps_every_image_loads_no_spline_tree_or_font(tmp_path):
    run = f"import creation\ncreation.main(['--n', '2', '--out', {str(tmp_path)!r}, '--workers', '1', '--quiet'])"
    assert loaded_after(run) == ["scipy.interpolate", "scipy.spatial"]  # drawing does load them
    assert loaded_after(run) == []


def test_merging_shards_loads_no_spline_tree_or_font(tmp_path):
    for shard in ("0/2", "1/2"):
        loaded_after(f"import creation\ncreation.main(['--n', '2', '--out', {str(tmp_path)!r}, '--shard', {shard!r}, "
                     "'--workers', '1', '--quiet'])")
    assert loaded_after(f"import creation\ncreation.main(['--n', '2', '--out', {str(tmp_path)!r}, '--merge', '--quiet'])") == []
    assert (tmp_path / "annotations.jsonl").exists()
