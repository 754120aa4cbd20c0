"""Llama.from_pretrained as llama-cpp-python's: list the hub repository (HfFileSystem), pick the
one file that matches a glob (and the additional_files' globs), download through
huggingface_hub, and load it. A hub that cannot be reached is a ModelFetchError within seconds."""
from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path
from typing import List, Optional

from pyriver.errors import ModelFetchError
from pyriver.models.hub import _hub_unreachable


def _match(file_list: List[str], pattern: str, repo_id: str) -> str:
    hits = [f for f in file_list if fnmatch.fnmatch(f, pattern)]
    if not hits:
        raise ValueError(f"No file found in {repo_id} that match {pattern}\n\nAvailable Files:\n{json.dumps(file_list)}")
    if len(hits) > 1:
        raise ValueError(f"Multiple files found in {repo_id} matching {pattern}\n\nAvailable Files:\n{json.dumps(file_list)}")
    return hits[0]


def download(repo_id: str, filename: str, additional_files: Optional[List[str]] = None, local_dir=None,
             local_dir_use_symlinks="auto", cache_dir=None) -> str:
    try:
        import huggingface_hub
        from huggingface_hub import HfFileSystem, hf_hub_download
        from huggingface_hub.utils import validate_repo_id
    except ImportError as e:
        raise ImportError("Llama.from_pretrained requires the huggingface-hub package: pip install huggingface-hub") from e
    validate_repo_id(repo_id)
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ModelFetchError(f"cannot list {repo_id}: the Hugging Face Hub is disabled (HF_HUB_OFFLINE is set)")
    endpoint = os.environ.get("HF_ENDPOINT") or getattr(huggingface_hub.constants, "ENDPOINT", "https://huggingface.co")
    err = _hub_unreachable(endpoint)
    if err:
        raise ModelFetchError(f"cannot list {repo_id}: the Hugging Face Hub could not be reached ({err}); "
                              f"download the file some other way and pass its path to Llama(model_path=...)")
    try:
        files = [f["name"] if isinstance(f, dict) else f for f in HfFileSystem().ls(repo_id, recursive=True)]
    except Exception as e:
        raise ModelFetchError(f"cannot list {repo_id} on the Hugging Face Hub: {type(e).__name__}: {e}") from e
    file_list = [str(Path(f).relative_to(repo_id)) for f in files]

    def fetch(rel: str, **kw) -> str:
        try:
            return hf_hub_download(repo_id=repo_id, filename=Path(rel).name, subfolder=str(Path(rel).parent),
                                   local_dir=local_dir, local_dir_use_symlinks=local_dir_use_symlinks,
                                   cache_dir=cache_dir, **kw)
        except Exception as e:
            raise ModelFetchError(f"cannot download {repo_id}/{rel}: {type(e).__name__}: {e}") from e

    main = _match(file_list, filename, repo_id)
    path = fetch(main)
    for pattern in additional_files or []:
        fetch(_match(file_list, pattern, repo_id))
    return path if local_dir is None else os.path.join(local_dir, Path(main).name)
