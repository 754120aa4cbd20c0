"""pyriver.engine.widerows.threshold: from the prompt steps timed in both layouts, the largest size where
the file's layout was slower (the fastest run of each: another process only ever adds time), else 16."""
from __future__ import annotations

from pyriver.engine.widerows import DEFAULT, threshold


def t(wide, one):
    return {"wide": wide, "one": one}


def test_every_size_faster_in_the_file_layout_keeps_the_default():
    assert threshold({17: t([1.0], [2.0]), 24: t([1.0], [1.5]), 32: t([1.0], [1.1])}) == DEFAULT == 16


def test_the_largest_slower_size_is_the_threshold():
    # a Zen 3: slower at 17 and 24, faster at 32
    assert threshold({17: t([0.74], [0.44]), 24: t([0.85], [0.73]), 32: t([0.72], [0.81])}) == 24
    # a slower size above a faster one still counts: no prompt step at or under it reads the file's layout
    assert threshold({17: t([0.9], [1.0]), 24: t([1.1], [1.0]), 32: t([0.9], [1.0])}) == 24


def test_the_fastest_run_of_each_layout_decides():
    # one slow repeat of the file's layout (another process) does not make it the slower one
    assert threshold({17: t([3.0, 0.9, 0.95], [1.0, 1.0, 1.2])}) == DEFAULT
    assert threshold({17: t([0.9, 1.1], [0.5, 2.0])}) == 17


def test_a_link_to_the_model_shares_its_measurement(tmp_path):
    """The threshold chooses a prompt step's layout (its bits): a model named through a link (a
    --models-dir entry) must get the file's measurement, not a new one that may choose otherwise."""
    from types import SimpleNamespace
    from pyriver.models.cache import setting_key
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    (tmp_path / "link.gguf").symlink_to(f)

    def llm(path, threads=2):
        return SimpleNamespace(model_path=str(path), n_threads=threads, n_threads_batch=threads,
                               devices=lambda: ["CPU"], batch_invariant=False)
    assert setting_key(llm(tmp_path / "link.gguf"), what="x") == setting_key(llm(f), what="x")
    assert setting_key(llm(f, threads=4), what="x") != setting_key(llm(f), what="x")


def test_other_kernels_measure_the_threshold_again(tmp_path, monkeypatch):
    """The repacked layout's prompt steps of up to 64 rows are the Q4_K kernel's: a threshold measured
    under another revision of the kernels (the native library's) is not read, it is measured again."""
    from types import SimpleNamespace
    from pyriver.engine import widerows
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    llm = SimpleNamespace(model_path=str(f), n_threads=2, n_threads_batch=2, devices=lambda: ["CPU"],
                          batch_invariant=False, n_ctx=lambda: 512)
    monkeypatch.setattr(widerows, "cache_dir", lambda: tmp_path)
    measured = []
    monkeypatch.setattr(widerows, "measure", lambda llm, prompt, tick=None: measured.append(1) or {17: t([0.9], [0.5])})
    assert widerows.auto(llm, [1]) == 17 and widerows.auto(llm, [1]) == 17 and len(measured) == 1   # cached
    revision = widerows.tiled_revision()
    monkeypatch.setattr(widerows, "tiled_revision", lambda: revision + 1)
    assert widerows.auto(llm, [1]) == 17 and len(measured) == 2
