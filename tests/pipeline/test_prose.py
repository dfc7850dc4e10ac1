"""Text for readers: parameter values as a person writes them, descriptions in short paragraphs, inline markdown."""

import pytest

from dmllab.experiments import registry
from dmllab.pipeline.prose import PARAGRAPH_CHARS, human, inline_spans, paragraphs


@pytest.mark.parametrize(
    "value, text",
    [
        (1 / 9, "1/9"),
        (1 / 3, "1/3"),
        (2 / 3, "2/3"),
        (1 / 81, "1/81"),
        (400.0, "4e2"),
        (4000.0, "4e3"),
        (1000.0, "1e3"),
        (0.004, "4e-3"),
        (1e-5, "1e-5"),
        (0.001, "1e-3"),
        (40.0, "40"),
        (16.0, "16"),
        (0.5, "0.5"),
        (0.0625, "0.0625"),
        (0.04, "0.04"),
        (2.5, "2.5"),
        (0.0, "0"),
        (3.75, "3.75"),
        (0.123456789, "0.123457"),
        (float("inf"), "inf"),
        (2000, "2000"),  # ints are counts: as written
        (True, "True"),
        (None, "None"),
        ("cars", "'cars'"),
        ([1.0, 1 / 3, 1 / 9], "[1, 1/3, 1/9]"),
        ({"softmax": [0.5, 400.0]}, "{'softmax': [0.5, 4e2]}"),
    ],
)
def test_human(value, text):
    assert human(value) == text


def test_human_reads_back_to_the_value():
    for value in (1 / 9, 1 / 27, 400.0, 0.004, 0.0625, 2 / 3, 1e-5):
        assert eval(human(value)) == pytest.approx(value, rel=1e-12)


def test_paragraphs_keep_the_words_and_cut_at_sentence_ends():
    text = " ".join(f"Sentence {i} says Fig. {i} and App. D matter, e.g. this one." for i in range(20))
    paras = paragraphs(text)
    assert len(paras) > 1 and all(len(p) <= PARAGRAPH_CHARS for p in paras)
    assert " ".join(paras) == text
    assert all(p.startswith("Sentence ") and p.endswith(".") for p in paras)  # never after "Fig." or "e.g."


def test_paragraphs_keep_the_authors_blank_lines_and_long_sentences():
    assert paragraphs("One.\n\nTwo\nlines.") == ["One.", "Two lines."]
    long = "x" * (PARAGRAPH_CHARS + 50) + "."
    assert paragraphs(long) == [long]


def test_every_description_reads_in_short_paragraphs():
    for artifact in registry.all_artifacts():
        paras = paragraphs(artifact.description)
        assert " ".join(paras) == " ".join(artifact.description.split()), artifact.id
        assert all(len(p) <= 2 * PARAGRAPH_CHARS for p in paras), (artifact.id, [len(p) for p in paras])


def test_inline_spans():
    assert inline_spans("a `x<y` and **b** and *c* < d") == [
        ("text", "a "),
        ("code", "x<y"),
        ("text", " and "),
        ("b", "b"),
        ("text", " and "),
        ("i", "c"),
        ("text", " < d"),
    ]
    assert inline_spans("2 * 3 * 4") == [("text", "2 * 3 * 4")]
