"""`train.batches: epochs` (issue 51): every training row once an epoch, in a fresh order each epoch, the last
batch smaller, each member from its own generator, and a checkpoint taken mid-epoch resumes the same batches."""

import pytest
import torch
from test_model_contract import example

from grokray.engine import PackTrainer, load_checkpoint, save_checkpoint
from grokray.engine.batches import EpochBatches
from grokray.errors import SpecError
from grokray.optim.group import MemberRandom


def test_an_epoch_visits_every_training_row_once_and_the_last_batch_is_smaller():
    rows = torch.arange(100, 110).view(1, -1)  # one member, 10 training rows, batch 4: 4 + 4 + 2
    batches = EpochBatches([10], 4, MemberRandom([0], "cpu", salt=0))
    epochs = []
    for _ in range(2):
        seen, sizes = [], []
        for _ in range(3):
            idx, w = batches.next(rows, torch.tensor([10]), torch.float64)
            n = int((w > 0).sum())
            sizes.append(n)
            seen += idx[0, :n].tolist()
            assert torch.allclose(w[0, :n], torch.full((n,), 1.0 / n, dtype=torch.float64))
            assert (w[0, n:] == 0).all()
        assert sizes == [4, 4, 2] and sorted(seen) == list(range(100, 110))
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # shuffled again


def test_a_member_draws_the_same_epochs_alone_and_in_a_pack():
    rows = torch.stack([torch.arange(10), torch.arange(20, 30)])
    n = torch.tensor([10, 7])  # the second member has 7 training rows: epochs of 4 + 3
    pack = EpochBatches([10, 7], 4, MemberRandom([3, 5], "cpu", salt=0))
    alone = EpochBatches([7], 4, MemberRandom([5], "cpu", salt=0))
    for _ in range(5):
        packed, pw = pack.next(rows, n, torch.float64)
        solo, sw = alone.next(rows[1:], n[1:], torch.float64)
        assert torch.equal(packed[1], solo[0]) and torch.equal(pw[1], sw[0])


def epoch_spec(*extra):
    return example("transformer", "train.batch_size=8", "train.batches=epochs", "train.dtype=float64",
                   "train.steps=40", "phases.budget=40", "phases.stop_when_classified=false", *extra)


def test_a_checkpoint_mid_epoch_resumes_the_same_batches(tmp_path):
    whole = PackTrainer([epoch_spec()])
    whole.run()
    part = PackTrainer([epoch_spec()])
    part.run(until=13)  # mid-epoch: 15 training rows (p = 5, fraction 0.6) are a batch of 8, then one of 7
    save_checkpoint(part, tmp_path / "pack.pt")
    resumed = PackTrainer([epoch_spec()])
    load_checkpoint(resumed, tmp_path / "pack.pt")
    resumed.run()
    for g, flat in whole.model.flat.items():
        assert torch.allclose(flat, resumed.model.flat[g], atol=1e-12, rtol=0)


def test_epochs_train_otherwise_than_iid_batches():
    epochs, iid = PackTrainer([epoch_spec()]), PackTrainer([epoch_spec("train.batches=iid")])
    epochs.run()
    iid.run()
    assert not torch.allclose(epochs.model.flat["decoder"], iid.model.flat["decoder"])


def test_epochs_need_an_integer_batch_size():
    with pytest.raises(SpecError) as err:
        example("toy", "train.batches=epochs")
    assert "train.batches" in str(err.value) and "integer batch_size" in str(err.value)
