"""textrain: a TensorFlow 2 training framework with pluggable data problems.

The installed distribution owns this one import name; the source folders (framework/, problems/, models/,
trainers/, configs/) are its subpackages (setup.py maps them), so code imports `textrain.framework...`.
"""
__version__ = "0.1.0"
