"""The spec, from the user's YAML to one trial's configuration and the form it crosses to a worker in.

file.py reads the YAML safely; keys.py and rules.py hold its vocabulary and the rules no field's type says;
overrides.py applies `-s KEY=value` and the scale presets; blocks.py types each block (train, optim, phases) with
errors a researcher can act on; trial.py parses one configuration; build.py validates the whole spec and expands
its sweep; wire.py is a pack as Tune stores it. This file imports nothing, so `grokray.spec.keys` (the CLI
parser's) and `grokray.spec.blocks` (a tracker's) load no torch.
"""
