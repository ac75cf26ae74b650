import pytest
from sims_helpers import hardware


@pytest.fixture
def h100() -> dict:
    return hardware("h100")
