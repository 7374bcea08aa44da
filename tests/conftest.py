"""Test-wide set-up: quiet TF, and split the CPU into 2 logical devices so multi-replica paths
(MirroredStrategy) run for real on any machine. Must happen before TF initialises its devices."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(os.path.dirname(REPO), "shared", "corpora")


@pytest.fixture
def corpora_dir():
    """../shared/corpora, or skip the test where it is absent (a fresh clone without shared/)."""
    if not os.path.isdir(CORPORA):
        pytest.skip(f"{CORPORA} is absent")
    return CORPORA


def pytest_collection_modifyitems(config, items):
    """The end-to-end tests marked slow run first (the order is otherwise kept): with two xdist workers the
    minute-long runs start early and the short tests fill the end, so neither worker waits idle on a last
    long test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
