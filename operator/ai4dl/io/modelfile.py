"""Model documents on disk (JSON). The one place that reads or writes model files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from ai4dl.method.document import PhaseModelDocument
from ai4dl.method.document_bounds import MAX_DOCUMENT_BYTES
from ai4dl.errors import ModelError
from ai4dl.io.writers import write_text_atomic
from ai4dl.method.model import PhaseModel, validation_message


def save_model(model: PhaseModel | PhaseModelDocument, path: str | os.PathLike) -> Path:
    """Write atomically (temp file + rename), so an interrupted write never leaves half a model."""
    doc = model.to_document() if isinstance(model, PhaseModel) else model
    return write_text_atomic(path, doc.model_dump_json(by_alias=True, exclude_none=True))


#: A file above this cannot hold a valid document, even indented (4-space indented JSON
#: measured at under 4 x the compact size): refused before it is read, so a huge file costs
#: no memory.
MAX_FILE_BYTES = 8 * MAX_DOCUMENT_BYTES


def read_document(path: str | os.PathLike) -> PhaseModelDocument:
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise ModelError(f"{path}: {size / 2 ** 20:.1f} MiB, larger than any model document "
                             f"({MAX_DOCUMENT_BYTES // 1024} KiB serialised; files above "
                             f"{MAX_FILE_BYTES / 2 ** 20:g} MiB are not read)")
        raw = Path(path).read_text()
    except OSError as err:
        raise ModelError(f"{path}: cannot read model: {err.strerror or err}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ModelError(f"{path}: not a JSON model document (line {err.lineno}: {err.msg})") \
            from None
    try:
        return PhaseModelDocument.model_validate(data)
    except ValidationError as err:
        raise ModelError(f"{path}: {validation_message(err)}") from None


def load_model(path: str | os.PathLike) -> PhaseModel:
    try:
        return PhaseModel.from_document(read_document(path))
    except ModelError as err:
        msg = str(err)
        raise ModelError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
