"""Test helpers for spec_actor: tiny, self-written GGUF models.

See :mod:`spec_actor.testing.tiny_models`. Nothing here downloads anything;
the models are written from a fixed random seed with numpy.
"""
