"""llama-server's model presets (`pyriver serve --models-preset FILE.ini`): each INI section a model
of the router, its keys the server's flags without the dashes (`ctx-size = 4096`, `c = 4096`, or
the environment name `LLAMA_ARG_CTX_SIZE`; a flag that takes no value as `jinja = true`). `[*]`
holds what every model gets; a section named as a --models-dir model configures that model, any
other section is a model of its own and names its file (`model = PATH`). Precedence, as
llama-server's: the command line, then the model's section, then `[*]`. Keys only a preset has:
`load-on-startup` (loaded when the server starts); `stop-timeout` and `dedup-cache-models` are
accepted and change nothing here (models are unloaded in this process; there is no hub cache)."""
from __future__ import annotations

import argparse
import configparser
from typing import Dict, List, Optional

GLOBAL = "*"
PRESET_ONLY = ("load-on-startup", "stop-timeout", "dedup-cache-models")
# set by the router for every model: a preset's value is dropped, as llama-server drops it
RESERVED = ("host", "port", "api-key", "api-key-file", "ssl-key-file", "ssl-cert-file", "models-dir", "models-max",
            "models-preset", "models-autoload", "no-models-autoload")
_TRUE, _FALSE = ("1", "true", "on", "yes", "enabled"), ("0", "false", "off", "no", "disabled")


class Preset:
    """One model's section (with [*] under it): its options as the file wrote them, by flag name."""

    def __init__(self, name: str, options: Dict[str, str], own: bool = True):
        self.name, self.options = name, options
        self.own = own   # a section names it (not only [*] over a --models-dir model)

    @property
    def load_on_startup(self) -> bool:
        return _truthy(self.options.get("load-on-startup", "false"))

    def ini(self, parser: argparse.ArgumentParser, path: str) -> str:
        """The section as INI text (GET /models' status.preset, as llama-server shows it): each flag by
        its long name, then the model's file; no alias or tags (the entry lists those)."""
        lines = [f"[{self.name}]"]
        for k, v in self.options.items():
            action = parser._option_string_actions.get("--" + k) or parser._option_string_actions.get("-" + k)
            name = next((o[2:] for o in action.option_strings if o.startswith("--")), k) if action else k
            if name not in ("alias", "tags", "model"):
                lines.append(f"{name} = {v}")
        return "\n".join(lines + [f"model = {path}"]) + "\n\n"


def _truthy(v: str) -> bool:
    if v.strip().lower() in _TRUE:
        return True
    if v.strip().lower() in _FALSE:
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _key(key: str) -> str:
    """A preset key as the flag's long name: LLAMA_ARG_CTX_SIZE -> ctx-size."""
    k = key.strip()
    if k.upper().startswith("LLAMA_ARG_"):
        k = k[len("LLAMA_ARG_"):].lower().replace("_", "-")
    return k


def read(path: str, dir_names=()) -> Dict[str, Preset]:
    """{model name: Preset} of an INI file, [*] merged under each, and [*] alone for each of dir_names
    (the --models-dir models) that no section names; a clear ValueError for a bad file."""
    cp = configparser.ConfigParser(interpolation=None, comment_prefixes=(";", "#"), delimiters=("=",),
                                   default_section="\0none")
    cp.optionxform = str   # keys keep their case (environment names)
    try:
        with open(path) as f:
            cp.read_string("[\0top]\n" + f.read(), source=path)   # keys before the first section (version)
    except OSError as e:
        raise ValueError(f"--models-preset: cannot read {path}: {e.strerror}") from None
    except configparser.Error as e:
        raise ValueError(f"--models-preset {path}: {e}") from None
    sections = {name: {_key(k): v.strip() for k, v in cp.items(name)} for name in cp.sections() if name != "\0top"}
    common = sections.pop(GLOBAL, {})
    own = set(sections)
    sections.update({name: {} for name in dir_names if name not in sections})
    out = {}
    for name, opts in sections.items():
        merged = {k: v for k, v in {**common, **opts}.items() if k not in RESERVED}
        out[name] = Preset(name, merged, name in own)
        try:
            out[name].load_on_startup   # checked here, before the server starts
        except ValueError as e:
            raise ValueError(f"--models-preset {path}: [{name}] load-on-startup: {e}") from None
    return out


def to_argv(p: Preset, parser: argparse.ArgumentParser, path: str) -> List[str]:
    """The preset's options as command-line flags of `pyriver serve`."""
    argv: List[str] = []
    for key, value in p.options.items():
        if key in PRESET_ONLY:
            continue
        flag = next((f for f in ("--" + key, "-" + key) if f in parser._option_string_actions), None)
        if flag is None:
            raise ValueError(f"--models-preset {path}: [{p.name}] {key}: not a `pyriver serve` flag")
        action = parser._option_string_actions[flag]
        if action.nargs == 0:   # a switch: true sets it, false leaves it (or sets its --no- form)
            try:
                on = _truthy(value)
            except ValueError as e:
                raise ValueError(f"--models-preset {path}: [{p.name}] {key}: {e}") from None
            neg = "--no-" + key
            argv += [flag] if on else ([neg] if neg in parser._option_string_actions else [])
        else:
            argv += [flag, value]
    return argv


def given(parser: argparse.ArgumentParser, argv: List[str]) -> Dict:
    """The destinations the command line itself set (it wins over a preset)."""
    saved = [(a, a.default) for a in parser._actions]
    try:
        for a, _ in saved:
            a.default = argparse.SUPPRESS
        return vars(parser.parse_args(argv))
    finally:
        for a, d in saved:
            a.default = d


class PresetModel:
    """A router model a preset configures: its file, the settings its Server gets, its aliases and tags
    (the preset's `alias` and `tags`, comma-separated, as llama-server's router lists them)."""

    def __init__(self, preset: Preset, path: str, settings: Dict, in_dir: bool, parser: argparse.ArgumentParser):
        self.preset, self.path, self.settings = preset, path, settings
        self.ini = preset.ini(parser, path)   # GET /models' status.preset
        self.in_dir = in_dir   # a --models-dir file: a reload of the directory may drop it
        self.source = "preset" if preset.own else "models_dir"   # GET /models' source, as llama-server's
        # sorted sets, as llama-server's router keeps them
        self.aliases = sorted({x for x in (settings.get("alias") or "").split(",") if x and x != preset.name})
        self.tags = sorted({x for x in (settings.get("tags") or "").split(",") if x})
        self.settings["alias"] = preset.name   # the name the router serves it under, as llama-server sets it


def _model(p: Preset, dir_path: Optional[str], parser: argparse.ArgumentParser, cli: Dict, path: str,
           to_settings) -> PresetModel:
    """The preset's flags under the command line's, checked as `pyriver serve` checks its own
    (to_settings: pyriver.server.settings)."""
    try:
        ns = parser.parse_args(to_argv(p, parser, path))
    except SystemExit:
        raise ValueError(f"--models-preset {path}: [{p.name}]: a value `pyriver serve` refuses (above)") from None
    for dest, v in cli.items():
        setattr(ns, dest, v)
    model, in_dir = ns.model_file or dir_path, not ns.model_file
    if model is None:
        raise ValueError(f"--models-preset {path}: [{p.name}] is no --models-dir model and names no file "
                         "(model = PATH)")
    ns.model, ns.model_file, ns.models_dir, ns.models_preset = model, None, None, None
    try:
        st = to_settings(ns)
    except ValueError as e:
        raise ValueError(f"--models-preset {path}: [{p.name}]: {e}") from None
    return PresetModel(p, model, st, in_dir, parser)


def load(path: str, dir_models: Dict[str, str], argv: List[str], parser: argparse.ArgumentParser,
         to_settings) -> Dict[str, PresetModel]:
    """{name: PresetModel} of every section of the file; dir_models: the --models-dir models by name
    (a section of that name configures it); argv: the router's own command line."""
    cli = given(parser, argv)
    return {name: _model(p, dir_models.get(name), parser, cli, path, to_settings)
            for name, p in read(path, dir_models).items()}
