"""The search's upper floor, above the launch layer it drives: driver (`grokray search`), searcher (Tune's Searcher
over the study: the one Ray-facing file), record (the study's report, trial links and finished parent in the
store) and confirmation (the fresh-seed confirmation launch). Import the module you need."""
