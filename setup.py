"""textrain: a TensorFlow 2 training framework with pluggable data problems."""
import os

from setuptools import find_packages, setup

# The CPU build by default (CI, laptops). GPU users install with
#   TEXTRAIN_TF="tensorflow[and-cuda]" pip install .
# so that only one TensorFlow distribution lands in the environment.
_TF = os.environ.get("TEXTRAIN_TF", "tensorflow-cpu")

setup(
    name="textrain",
    version="0.1.0",
    description="Pluggable data problems, BERT / ELECTRA / XLNet models and tf.distribute trainers.",
    python_requires=">=3.11",
    # One import name of its own: the repository root is the package `textrain`, its folders the subpackages
    # (`textrain.framework`, ...), so nothing generic (`framework`, `models`) lands in site-packages.
    package_dir={"textrain": "."},
    packages=["textrain"] + [f"textrain.{p}" for p in find_packages(include=[
        "framework", "framework.*", "problems", "problems.*", "models", "models.*", "trainers", "trainers.*"])],
    # configs/ ships in the wheel: `--gin_file=bert_base.gin` resolves by name from the installed package.
    package_data={"textrain": ["configs/*.gin", "configs/*.flags", "configs/README.md"]},
    install_requires=[
        f"{_TF}==2.21.*",
        "sentencepiece>=0.2",
        "numpy>=1.26",
        "absl-py>=2.1",
        "gin-config>=0.5",
        # TF 2.21 no longer brings TensorBoard; the trainers write summaries for it.
        "tensorboard==2.21.*",
        # HF tokenizers: the normaliser and pre-tokeniser the WordPiece vocabulary learner uses, and the optional
        # backend="hf" of WordpieceEncoder (the default encoder is textrain's own; benchmarks/bench_wordpiece.py).
        "tokenizers>=0.15",
        # BLEU as translation papers report it (detokenised text, its own 13a/zh tokenisers, a signature):
        # textrain-decode --reference_file. Pure Python; installs nothing TensorFlow depends on.
        "sacrebleu>=2.3",
        # CRC32C in C (Google's, the checksum TFRecords use): datagen frames local TFRecords itself and so runs
        # without importing TensorFlow (~2.4 CPU-s and ~540 MiB per process; framework/fileio.py).
        "google-crc32c>=1.5",
        # Hugging Face checkpoints (textrain-convert, and every --init_checkpoint may be an HF directory):
        # read and written through its numpy API, so no torch is needed.
        "safetensors>=0.4",
    ],
    extras_require={
        # ruff: the linter the test command runs first (pyproject.toml [tool.ruff]); datasets:
        # tests/test_corpus_formats.py writes a real save_to_disk directory with it; pytest-xdist: the test
        # command runs two tests at a time (most wait on one core), keeping CI's 2-core run under 20 minutes.
        "test": ["pytest>=7", "ruff>=0.6", "datasets>=2.14", "pytest-xdist>=3.5"],
        # textrain-datagen --runner=beam (docs/BEAM.md). 2.77 needs protobuf<7 (6.33), which TF 2.21 accepts
        # (>=6.31.1,<8): verified together with TF 2.21.0.
        "beam": ["apache-beam>=2.77,<3"],
        # --word_segmenter=jieba (Chinese whole-word masking; pure Python).
        "zh": ["jieba>=0.42"],
        # Corpora where users keep them (framework/corpus_formats/): Parquet/Arrow/`datasets` dirs (pyarrow),
        # .zst (zstandard), MediaWiki dumps (mwparserfromhell strips the markup), and the default sentence
        # splitter for records that hold documents (blingfire: best boundary F1 of the candidates measured by
        # benchmarks/bench_splitters.py, English and Chinese, at ~15 MB/s per core); orjson parses JSON Lines
        # ~4x faster than the json module (what brings JSON Lines within 1.5x of plain text in
        # benchmarks/bench_corpus_formats.py; the json module still reads what orjson refuses). Imported only when used.
        "corpora": ["pyarrow>=14", "zstandard>=0.22", "mwparserfromhell>=0.6", "blingfire>=0.1.8", "orjson>=3.8"],
    },
    entry_points={
        "console_scripts": [
            "textrain-datagen=textrain.framework.datagen:run",
            "textrain-train-gpu=textrain.trainers.train_gpu:run",
            "textrain-train-tpu=textrain.trainers.train_tpu:run",
            "textrain-finetune=textrain.trainers.finetune:run",
            "textrain-decode=textrain.trainers.decode:run",
            "textrain-avg-checkpoints=textrain.trainers.avg_checkpoints:run",
            "textrain-convert=textrain.trainers.convert:run",
        ],
    },
)
