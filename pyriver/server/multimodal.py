"""Multimodal requests (`pyriver serve --mmproj FILE`), as llama-server takes them: a chat message's
image_url, input_audio and input_video / video_url parts become the media marker in its text (the
message's parts then join into one string: a newline between text parts, none around a marker:
common_chat_msg::to_json_oaicompat), and the rendered prompt with the files goes through libmtmd's
tokenizer (engine/mtmd.py) into text tokens and media chunks; /completion's JSON prompt
{"prompt_string": ..., "multimodal_data": [base64, ...]} does the same with the text as given. The
marker is llama-server's: LLAMA_MEDIA_MARKER when set, else random for the process (/props tells).
Without a projector, media is a 400; a JSON prompt without multimodal_data is plain text."""
from __future__ import annotations

import os
import secrets
import string
from typing import Dict, List, Optional, Tuple

from pyriver.engine.mtmd import NULL_TOKEN, MediaError, MediaPrompt
from pyriver.server import media as M
from pyriver.server.schema import APIError

_MEDIA_PARTS = {"image_url": ("image_url", "vision", "image"), "input_audio": ("input_audio", "audio", "audio"),
                "input_video": ("input_video", "video", "video"), "video_url": ("video_url", "video", "video")}
_MARKER: Optional[str] = None


def marker() -> str:
    """The media marker of this process (llama-server's get_media_marker)."""
    global _MARKER
    if _MARKER is None:
        env = os.environ.get("LLAMA_MEDIA_MARKER")
        abc = string.ascii_letters + string.digits
        _MARKER = env or "<__media_" + "".join(secrets.choice(abc) for _ in range(32)) + "__>"
    return _MARKER


def modalities(srv) -> Dict[str, bool]:
    p = getattr(srv, "projector", None)
    return {"vision": bool(p and p.vision), "video": bool(p and p.video), "audio": bool(p and p.audio)}


def models_entry(srv) -> Dict:
    """llama-server's entry of its model in /v1/models' "models" list: its capabilities
    ("multimodal" with a projector); the rest of the fields as llama-server fills them."""
    caps = ["completion", "multimodal"] if getattr(srv, "projector", None) is not None else ["completion"]
    return {"name": srv.model_id, "model": srv.model_id, "modified_at": "", "size": "", "digest": "", "type": "model",
            "description": "", "tags": [""], "capabilities": caps, "parameters": "",
            "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "",
                        "quantization_level": ""}}


def _url(part: Dict, key: str) -> object:
    v = part.get(key)
    if key == "image_url":
        return v.get("url") if isinstance(v, dict) else v
    if isinstance(v, dict):
        return v.get("data", v.get("url"))
    return v


def chat_media(srv, messages: List[Dict]) -> Tuple[List[Dict], List[bytes]]:
    """The messages with their content parts joined into one string, each media part replaced by the
    marker, and the files in order (llama-server's oaicompat_content_load_media; text parts joined
    with a newline, as llama-server joins them for every template that takes string content)."""
    files: List[bytes] = []
    out = []
    allowed = modalities(srv)
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        text, last_marker = "", False
        for p in content:
            kind = p.get("type") if isinstance(p, dict) else None
            if kind in _MEDIA_PARTS:
                key, cap, what = _MEDIA_PARTS[kind]
                if not allowed[cap]:
                    raise APIError(400, f"{what} input is not supported - hint: if this is unexpected, you may need "
                                   f"to provide the mmproj (a content part of type '{kind}': pyriver serve --mmproj "
                                   "FILE)", param="messages")
                files.append(M.load(_url(p, key), srv.settings.get("media_path")))
                text += marker()
                last_marker = True
            elif kind == "text" and isinstance(p.get("text"), str):
                text += ("\n" if text and not last_marker else "") + p["text"]
                last_marker = False
            else:
                raise APIError(400, "unsupported content[].type", param="messages")
        out.append(dict(m, content=text))
    return out, files


def tokenize(srv, text: str, files: List[bytes]) -> MediaPrompt:
    """libmtmd's tokens of a prompt text with its media (special tokens parsed, the model's BOS)."""
    try:   # the projector takes one prompt at a time (its own lock: not the Vocab's, which decoding waits on)
        return srv.projector.tokenize(text, files, add_special=True)
    except MediaError as e:
        raise APIError(400, str(e), param="prompt") from None


def json_prompt(srv, p: Dict):
    """/completion's JSON prompt (llama-server's tokenize_input_subprompt): a MediaPrompt with
    multimodal_data, else the prompt_string's text (None: the caller tokenizes it)."""
    if "multimodal_data" not in p:
        return None
    if getattr(srv, "projector", None) is None:
        raise APIError(400, "Multimodal data provided, but model does not support multimodal requests.",
                       param="prompt")
    data = p["multimodal_data"]
    if isinstance(data, str):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
        raise APIError(400, "'multimodal_data' must be a list of base64 strings", param="prompt")
    return tokenize(srv, p["prompt_string"], [M.b64decode(d) for d in data])


def check(srv, prompt: MediaPrompt) -> List[int]:
    """A media prompt's tokens, checked as Server.prompt_tokens checks text: it fits the context,
    and it ends with text (the logits of its last token start the answer)."""
    toks = prompt.tokens
    if not toks:
        raise APIError(400, "the prompt is empty", param="prompt")
    if toks[-1] == NULL_TOKEN:
        raise APIError(400, "a multimodal prompt must end with text after its last media", param="prompt")
    srv.prompt_tokens([0 if t == NULL_TOKEN else t for t in toks])   # the context's room (libmtmd's ids are valid)
    return toks
