"""One module per `midtrain` subcommand: argument parsing, recipe resolution and the call into a stage.

Application layer (see docs/development.md, "How the code is laid out"): these modules may import recipes, the demo and
several stages; no stage imports them. `midtrain/cli.py` lists them.
"""
