"""The files stages exchange: documents, packed shards, run directories.

This is the bottom layer: every stage imports it; it imports no stage (tests/test_layers.py checks).
"""
