"""`grokray atlas`: every seed figure regenerated at a named scale, one page each, compared with its paper.

config (the spec's atlas: block) and plan (specs -> pieces) are pure; runner talks to Ray and MLflow through the
sweep and search layers; page writes the markdown; build ties them together.
"""
