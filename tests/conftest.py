"""Strict numerics for every test: deterministic kernels, one thread (CI has 2 cores and runs Ray beside us)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _strict_numerics():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield
