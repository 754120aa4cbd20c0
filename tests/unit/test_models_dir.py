"""--models-dir's names (pyriver/server/models_dir.py), as llama-server's router gives them: NAME.gguf
is NAME, a folder is its name (its first shard, else its one GGUF), companions are no models."""
from __future__ import annotations

import pytest

from pyriver.server.models_dir import scan


def test_names_follow_llama_servers_router(tmp_path):
    for f in ("a.gguf", "b.Q4_0.gguf", "b.Q4_0.river-q4_0.gguf", "mmproj-a.gguf", "mtp-a.gguf", "notes.txt",
              "split/x-00002-of-00002.gguf", "split/x-00001-of-00002.gguf", "vis/model.gguf", "vis/mmproj-f16.gguf"):
        (tmp_path / f).parent.mkdir(exist_ok=True)
        (tmp_path / f).write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert scan(str(tmp_path)) == {"a": str(tmp_path / "a.gguf"), "b.Q4_0": str(tmp_path / "b.Q4_0.gguf"),
                                   "split": str(tmp_path / "split/x-00001-of-00002.gguf"),
                                   "vis": str(tmp_path / "vis/model.gguf")}


def test_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist or is not a directory"):
        scan(str(tmp_path / "nope"))


def test_the_command_line_refuses_a_model_beside_the_directory(tmp_path):
    from pyriver.server import parser, settings
    s = settings(parser().parse_args(["--models-dir", str(tmp_path), "--models-max", "2"]))
    assert (s["models_dir"], s["models_max"], s["models_autoload"]) == (str(tmp_path), 2, True)
    for extra in (["smol.gguf"], ["--alias", "x"], ["--model-draft", "d.gguf"], ["--models-max", "-1"]):
        with pytest.raises(ValueError):
            settings(parser().parse_args(["--models-dir", str(tmp_path), *extra]))
