"""Write-then-rename, the one way pyriver writes a file others may read: it appears complete or
not at all, and a reader that has the old file open or mapped keeps a valid file."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Union


@contextlib.contextmanager
def replacing(final: Union[str, "os.PathLike[str]"], suffix: str = ".tmp") -> Iterator[Path]:
    """A fresh hidden temporary path beside `final` (.NAME.XXXX<suffix>, mode 0644: caches may be
    shared) to write; it replaces `final` when the block ends, and is removed if the block raises
    (Ctrl-C included)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)
        yield Path(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: Union[str, "os.PathLike[str]"], text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)
