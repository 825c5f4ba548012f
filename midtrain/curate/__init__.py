"""Curation: make source documents safe and clean to train on (datatrove steps run by `midtrain prep`).

stages.py      CurationConfig (one nested config per step, each `enabled`) and curation_stages(), what prep calls
base.py        the curation step base (midtrain.steps.CountedStep: drops, changes, cut parts), text edits, repo files
text.py        text helpers: code word tokenizer, entropy, letter counts, normalised words and n-grams
license.py     permissive-license allow-list
decontam.py    SWE-bench repository exclusion (any name form, forks, renames, user lists) and n-gram overlap
quality.py     generated/minified/data files trimmed from repositories; near-empty/garbled documents dropped
secrets.py     secret and PII redaction with typed placeholders
dedup.py       exact + MinHash near-duplicate removal, per document and per repository file, across tasks
planted.py     the planted-secret corpus used by the tests and bench/bench_curate.py
"""
