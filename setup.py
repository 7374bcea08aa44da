"""textrain: a TensorFlow 2 training framework with pluggable data problems."""
from setuptools import setup

setup(
    name="textrain",
    version="0.1.0",
    description="Pluggable data problems, BERT / ELECTRA / XLNet models and tf.distribute trainers.",
    python_requires=">=3.11",
    packages=["framework", "problems", "models", "models.layers", "trainers"],
    package_data={"": ["*.gin"]},
    install_requires=[
        # TF 2.21 exactly: the CPU build is what CI and laptops use; GPU users add the [gpu] extra.
        "tensorflow-cpu==2.21.*; extra != 'gpu'",
        "sentencepiece>=0.2",
        "numpy>=1.26",
        "absl-py>=2.1",
        "gin-config>=0.5",
        # TF 2.21 no longer brings TensorBoard; the trainers write summaries for it.
        "tensorboard==2.21.*",
        # HF tokenizers gives a Rust WordPiece that matches bert's FullTokenizer ids at >10x its speed
        # (benchmarks/bench_wordpiece.py); small wheel, no dependency on the full tensorflow wheel.
        "tokenizers>=0.15",
    ],
    extras_require={
        "gpu": ["tensorflow[and-cuda]==2.21.*"],
        "test": ["pytest>=7"],
        "beam": ["apache-beam"],
    },
    entry_points={
        "console_scripts": [
            "textrain-datagen=framework.datagen:run",
        ],
    },
)
