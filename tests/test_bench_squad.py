"""The question rule and baselines of benchmarks/bench_squad.py part B (the real-text QA set):
hand-worked sentences, so that the documented rule is the one the figures come from."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_squad  # noqa: E402


def test_candidates_years_then_capitalised_runs_ending_at_a_word_end():
    s = "In 1539 the word was used by Francois Rabelais in Paris with Brønsted and McClellan."
    got = [(s[a:b], wh) for a, b, wh in bench_squad.candidates(s)]
    # "In" starts the sentence; "Br" of "Brønsted" and "Mc" of "McClellan" end inside a word.
    assert got == [("1539", "what year"), ("Francois Rabelais", "what"), ("Paris", "what")]
    assert bench_squad.candidates("Paris in 1900 only.") == []  # fewer than 6 words


def test_make_question_is_a_local_cloze():
    s = "The first use of this word in print was in 1539 by a monk."
    start = s.index("1539")
    assert bench_squad.make_question(s, start, start + 4, "what year", window=3) == "print was in what year by a monk?"
    end = s.index("monk") + 4
    assert bench_squad.make_question(s, s.index("monk"), end, "what", window=2) == "by a what?"


def test_build_sets_answers_sit_at_their_offsets_and_fit_the_query():
    train, dev = bench_squad.build_sets(200, 50) if os.path.exists(bench_squad.WIKI) else pytest.skip(
        "no ../shared/corpora/en/wikipedia_sample.txt.gz")
    for data in (train, dev):
        for p in data["data"][0]["paragraphs"]:
            for qa in p["qas"]:
                a = qa["answers"][0]
                assert p["context"][a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
                assert ("what year" in qa["question"]) == (bench_squad.YEAR.fullmatch(a["text"]) is not None)
                assert len(qa["question"].split()) <= 2 * 5 + 2


def test_baselines_hand_worked():
    context = ("Rome was founded in 1753 by Romulus and Remus long ago. "
               "The city grew under Augustus and later under Trajan in the empire.")
    qas = [{"id": "a", "question": "was founded in what year by Romulus and?",
            "answers": [{"text": "1753", "answer_start": context.index("1753")}]},
           {"id": "b", "question": "and later under what in the empire?",
            "answers": [{"text": "Trajan", "answer_start": context.index("Trajan")}]}]
    dev = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    got = bench_squad.baselines(dev)
    # first candidate: 1753 (right), Romulus (wrong: the first "what" span not in the question)
    assert got["first candidate"]["exact_match"] == pytest.approx(50.0)
    # the overlap rule reads the words around each candidate: both right
    assert got["overlap rule"]["exact_match"] == pytest.approx(100.0)
