"""cffi build script: the API-mode extension ``spec_actor.nif._native``.

The C declarations come from ``native/abi/spec_actor.h`` and, for the
testing ABI that ``spec_actor.nif.testing`` wraps, ``spec_actor_testing.h``
beside it (each between its CDEF markers), so the headers are the single
source of truth for the ABI. CMake runs
``python _build.py --emit OUT.c`` and compiles OUT.c together with the shim.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cffi

ABI = Path(__file__).resolve().parents[2] / "native" / "abi"
HEADER = ABI / "spec_actor.h"
TESTING_HEADER = ABI / "spec_actor_testing.h"

# Called by the native loop once per step with a msgpack batch of events.
CALLBACKS = """
extern "Python" int _sa_on_events(void *, const uint8_t *, size_t);
"""


def cdef_text(header: Path = HEADER) -> str:
    text = header.read_text()
    begin, end = text.index("/* CDEF-BEGIN */"), text.index("/* CDEF-END */")
    return text[begin + len("/* CDEF-BEGIN */"):end]


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(cdef_text(HEADER) + cdef_text(TESTING_HEADER) + CALLBACKS)
    ffi.set_source("spec_actor.nif._native", '#include "abi/spec_actor.h"\n#include "abi/spec_actor_testing.h"')
    return ffi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", required=True, help="path of the C file to write")
    args = parser.parse_args()
    make_ffi().emit_c_code(args.emit)


if __name__ == "__main__":
    main()
