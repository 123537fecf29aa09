"""``spec-actor info``: what a model is and which speculative types it can use."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._model import Model
from .._spec import DRAFT_MODEL_TYPES, SPEC_TYPES
from ._common import Subcommands, add_model_options, open_model


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("info", help="describe a model and the speculative types it can use",
                       description="Print a GGUF model's architecture, size, vocabulary, context length, "
                                   "NextN/MTP layers and the speculative types it can run.")
    add_model_options(p, positional=True)
    p.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    p.set_defaults(handler=run)


def describe(model: Model) -> dict[str, Any]:
    """The facts `info` prints, as plain data."""
    info = model.info
    own = list(info.speculative_types)
    needs_draft = [t for t in SPEC_TYPES if t in DRAFT_MODEL_TYPES]
    unavailable = [t for t in SPEC_TYPES if t not in own and t not in needs_draft]
    return {
        "path": info.path,
        "name": model.meta("general.name"),
        "architecture": info.arch,
        "description": info.description,
        "parameters": info.n_params,
        "size_bytes": info.size_bytes,
        "vocabulary": info.n_vocab,
        "context_length": info.n_ctx_train,
        "layers": info.n_layer,
        "embedding": info.n_embd,
        "nextn_layers": info.n_layer_nextn,
        "recurrent": info.is_recurrent,
        "chat_template": bool(model.chat_template()),
        "speculative_types": own,
        "with_draft_model": needs_draft,
        "unavailable": unavailable,
    }


def run(args: argparse.Namespace) -> int:
    facts = describe(open_model(args))
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    mtp_note = ""
    if "draft-mtp" in facts["speculative_types"]:
        mtp_note = " (draft-mtp loads them with --load-mtp, implied by --spec mtp)"
    rows = [
        ("model", facts["path"]),
        ("name", facts["name"] or "-"),
        ("architecture", f"{facts['architecture']} ({facts['description']})"),
        ("parameters", f"{_si(facts['parameters'])} ({facts['parameters']:,})"),
        ("size", f"{facts['size_bytes'] / 2**20:.1f} MiB"),
        ("vocabulary", f"{facts['vocabulary']:,} tokens"),
        ("context length", f"{facts['context_length']:,} tokens (trained)"),
        ("layers", f"{facts['layers']}, embedding width {facts['embedding']}"
                   + (", recurrent" if facts["recurrent"] else "")),
        ("NextN/MTP layers", f"{facts['nextn_layers']}{mtp_note}"),
        ("chat template", "yes" if facts["chat_template"] else "none"),
        ("speculative types", ", ".join(facts["speculative_types"])),
        ("with a draft model", ", ".join(facts["with_draft_model"]) + " (pass --draft-model PATH)"),
    ]
    if facts["unavailable"]:
        rows.append(("not available", ", ".join(facts["unavailable"]) + " (the model has no NextN/MTP layers)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _si(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)
