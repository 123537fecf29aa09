"""Native layer: the raw cffi module (``_native``) and checked wrappers.

``ffi`` and ``lib`` are private to this package; everything else in
spec_actor goes through the wrappers in ``model``, ``tokenizer`` and
``session``, which turn every native status into a ``SpecActorError``.
"""
