"""Lossless (speculative) decoding: drafters, the draft length by cost, the verify-cost curve.
May import: pyriver.engine, pyriver.text, pyriver.models (cache), pyriver.atomic, pyriver.errors."""
