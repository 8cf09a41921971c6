"""The worker side of a launch: what runs inside a Tune trial, on any node. trainable (train_pack: one trial
trains one pack, reports to Tune and writes its members' runs), context (the TrialContext every trial is told,
round-tripped through Ray's param space). A trial's pack comes as a file the launch wrote beside the Tune experiment
(spec/wire.py). The launch layer (run/) writes the packs and hands Tune `train_pack`; it is the only side that
starts Ray or builds a Tuner. Import the module you need."""
