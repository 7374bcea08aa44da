"""benchmarks/lib/peers.py and the step benchmarks that run keras-hub beside ours: the flags parse, a missing
peer is said in one line and ours runs alone, the ratio line divides the right way. (The timed runs are
benchmarks, never tests: see benchmarks/README.md.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("script", ["bench_electra.py", "bench_xlnet_step.py"])
def test_help_lists_the_sides_flag(script):
    out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", script), "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--sides" in out
    assert "--step_batch_file" not in out and "--child" not in out  # the children's flags stay hidden


def test_missing_peer_is_one_line_and_ours_runs_alone(capsys, tmp_path):
    from benchmarks.lib import peers
    assert peers.choose_sides("ours,ours_content,peer", str(tmp_path / "no_python")) == ["ours", "ours_content"]
    assert capsys.readouterr().out == f"peer not installed: {peers.PEER_INSTALL}\n"
    assert peers.choose_sides("ours", str(tmp_path / "no_python")) == ["ours"]
    assert capsys.readouterr().out == ""


def test_ratio_line_is_ours_over_peer():
    from benchmarks.lib import peers, step_bench
    ours = {"step_wall_s": [1.0, 2.0], "step_cpu_s": [3.0, 3.0], "peak_rss_mib": 800.0}
    peer = {"step_wall_s": [2.0, 4.0], "step_cpu_s": [4.0, 2.0], "peak_rss_mib": 1000.0}
    line = step_bench.ratio_line("fp32", [ours], [peer], peers.GOAL)
    assert "step wall 0.50x, CPU 1.00x, peak RSS 0.80x" in line, line
    assert line.endswith(f"(goal {peers.GOAL})"), line


def test_bert_step_ratio_pairs_neighbouring_runs_and_takes_their_median():
    """bench_bert_step.py --rounds: round i's ours over round i's peer, the median of those, each listed;
    the peak RSS ratio compares each side's largest; the goal named is the config's."""
    from benchmarks import bench_bert_step as bench
    from benchmarks.lib.step_bench import paired_ratios, ratio_line
    ours = [{"step_wall_s": [w], "step_cpu_s": [2 * w], "peak_rss_mib": m} for w, m in ((6.0, 900), (7.0, 1000), (8.0, 950))]
    peer = [{"step_wall_s": [w], "step_cpu_s": [w], "peak_rss_mib": 2000} for w in (10.0, 8.0, 10.0)]
    assert paired_ratios(ours, peer, "step_wall_s") == [0.6, 0.875, 0.8]
    line = ratio_line("bf16", ours, peer, bench.goal("bf16"))
    assert "step wall 0.80x (rounds 0.60, 0.88, 0.80), CPU 1.60x, peak RSS 0.50x" in line, line
    assert "0.75x" in line and "0.75x" not in ratio_line("fp32", ours[:1], peer[:1], bench.goal("fp32"))
    assert "rounds" not in ratio_line("fp32", ours[:1], peer[:1], bench.goal("fp32"))


def test_bert_step_refuses_zero_rounds(capsys):
    from benchmarks import bench_bert_step as bench
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
