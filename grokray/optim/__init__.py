"""Stacked optimizers, one per parameter group of a pack (group.py), assembled from the optimizer kinds (kinds/)
and the gradient transforms (transforms/) they apply, and their pieces (primitives.py). The kinds and transforms
are declarations spec/blocks.py reads (they sit below it); group.py reads the blocks."""
