"""Native layer: the raw cffi module (``_native``) and checked wrappers.

``ffi`` and ``lib`` are private to this package; everything else in
spec_actor goes through the wrappers in ``model`` and ``session`` (and the
test probes in ``testing``), which turn every native status into a
``SpecActorError`` and take and return plain Python values: this package
packs and unpacks every cffi struct. ``schema`` holds the constants, event
kinds and statistics fields as the compiled library defines them. The package
imports nothing from spec_actor but its exception classes.
"""
