"""Strict numerics for every test: deterministic kernels, one thread (CI has 2 cores and runs Ray beside us)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _strict_numerics():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray for one test module (never a bare ray.init(): it may join a stale cluster)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
