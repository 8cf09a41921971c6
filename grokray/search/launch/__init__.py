"""The search's upper floor, above the launch layer it drives: driver (`grokray search`: Tune's search algorithm and
concurrency limit) and searcher (Tune's Searcher over the study), the floor's two Ray-facing files; record (the
study's report, trial links and finished parent in the store) and confirmation (the fresh-seed confirmation
launch). Import the module you need."""
