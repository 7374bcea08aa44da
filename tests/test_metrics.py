"""framework/metrics.py against values worked by hand (the arithmetic is in each test)."""
import math

import numpy as np
import pytest

from textrain.framework import metrics


def test_accuracy():
    assert metrics.accuracy([0, 1, 1, 0, 2], [0, 1, 0, 0, 1]) == 3 / 5
    assert metrics.accuracy([], []) == 0.0


def test_f1_binary():
    labels = [1, 1, 1, 0, 0, 0, 1]
    preds = [1, 0, 1, 1, 0, 0, 0]
    # TP = 2 (idx 0, 2), FP = 1 (idx 3), FN = 2 (idx 1, 6): P = 2/3, R = 2/4, F1 = 2PR/(P+R) = (2/3)/(7/6) = 4/7
    assert metrics.f1_binary(labels, preds) == pytest.approx(4 / 7)
    # No true and no predicted positive: 0.0 (sklearn's zero_division).
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0


def test_macro_f1():
    labels = [0, 0, 1, 1, 2, 2]
    preds = [0, 1, 1, 1, 2, 0]
    # class 0: TP1 FP1 FN1 -> 2/4 = 0.5; class 1: TP2 FP1 FN0 -> 4/5 = 0.8; class 2: TP1 FP0 FN1 -> 2/3
    assert metrics.macro_f1(labels, preds) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    # num_classes=4 adds a class nobody has: F1 0, mean over 4.
    assert metrics.macro_f1(labels, preds, num_classes=4) == pytest.approx((0.5 + 0.8 + 2 / 3) / 4)


def test_matthews_corrcoef_binary_multiclass_and_zero():
    labels = [1, 1, 1, 0, 0, 0, 1]
    preds = [1, 0, 1, 1, 0, 0, 0]
    # TP=2 TN=2 FP=1 FN=2: (TP*TN - FP*FN)/sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (4-2)/sqrt(3*4*3*4) = 2/12
    assert metrics.matthews_corrcoef(labels, preds) == pytest.approx(1 / 6)
    # Multi-class: labels [0,0,1,1,2,2], preds [0,1,1,1,2,0]: t = [2,2,2], p = [2,3,1], c = 4, s = 6
    # (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)) = (24 - 12) / sqrt((36 - 14)(36 - 12)) = 12 / sqrt(528)
    assert metrics.matthews_corrcoef([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]) == pytest.approx(12 / math.sqrt(528))
    # One class predicted everywhere: the denominator is 0 -> 0.0 (as sklearn / GLUE CoLA).
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)


def test_pearson():
    x = [1.0, 2.0, 3.0, 4.0]
    y = [2.0, 1.0, 4.0, 3.0]
    # means 2.5, 2.5; dx = [-1.5,-.5,.5,1.5], dy = [-.5,-1.5,1.5,.5]; sum dx*dy = .75+.75+.75+.75 = 3;
    # sum dx^2 = 5, sum dy^2 = 5 -> r = 3/5
    assert metrics.pearson(x, y) == pytest.approx(0.6)
    assert metrics.pearson([1, 1, 1], [1, 2, 3]) == 0.0  # zero variance: 0.0, not nan


def test_spearman_with_ties():
    x = [10, 20, 20, 30]
    y = [1, 3, 2, 4]
    # ranks of x: 1, 2.5, 2.5, 4 (the tie shares (2+3)/2); ranks of y: 1, 3, 2, 4.
    assert metrics.average_ranks(x).tolist() == [1.0, 2.5, 2.5, 4.0]
    # Pearson of the ranks: means 2.5; dx = [-1.5, 0, 0, 1.5], dy = [-1.5, .5, -.5, 1.5]:
    # sum dx*dy = 2.25 + 2.25 = 4.5; sum dx^2 = 4.5; sum dy^2 = 2.25+.25+.25+2.25 = 5 -> 4.5/sqrt(22.5)
    assert metrics.spearman(x, y) == pytest.approx(4.5 / math.sqrt(22.5))
    assert metrics.average_ranks([3, 1, 3, 3]).tolist() == [3.0, 1.0, 3.0, 3.0]  # ranks 2,3,4 -> 3


def test_multilabel_micro_f1():
    labels = np.array([[1, 0, 1], [0, 1, 0]])
    preds = np.array([[1, 1, 0], [0, 1, 0]])
    # cells: TP = 2 ((0,0), (1,1)), FP = 1 ((0,1)), FN = 1 ((0,2)) -> 2*2 / (4 + 1 + 1) = 2/3
    assert metrics.multilabel_micro_f1(labels, preds) == pytest.approx(2 / 3)
    assert metrics.multilabel_micro_f1(np.zeros((2, 2)), np.zeros((2, 2))) == 0.0


def test_mean_squared_error():
    assert metrics.mean_squared_error([1, 2], [2, 4]) == pytest.approx((1 + 4) / 2)
