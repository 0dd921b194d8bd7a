import os

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=False)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def rng():
    return np.random.default_rng()
