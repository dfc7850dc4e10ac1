"""Text for readers, shared by the notebooks and the report: parameter values as a person writes them
(:func:`human`: ``1/9``, ``4e2``) and descriptions cut into short paragraphs (:func:`paragraphs`)."""

from __future__ import annotations

import math
import re
from typing import Any

PARAGRAPH_CHARS = 400
# Words that end with a full stop without ending a sentence ("Fig. 4", "App. D", "e.g. the").
_ABBREVIATIONS = frozenset(
    {"fig", "figs", "tab", "sec", "app", "eq", "eqs", "e.g", "i.e", "vs", "al", "cf", "no", "ref", "resp"}
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z(`'\"*])")


def _float(value: float) -> str:
    """A float as a person writes it: ``0.5``, ``16``, ``4e2``, ``1e-3``, ``1/9``, ``2/3``."""
    if not math.isfinite(value):
        return repr(value)
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.0e}".split("e")
    if float(f"{mantissa}e{exponent}") == value and (int(exponent) >= 2 or int(exponent) <= -3):
        return f"{mantissa}e{int(exponent)}"  # one significant digit: 4e2, 1e-3
    if value.is_integer():
        return str(int(value))
    short = repr(value)
    if len(short) <= 7:
        return short  # 0.25, 0.0625, 2.5
    for q in range(2, 1001):
        p = value * q
        if abs(p - round(p)) <= 1e-9 * max(1.0, abs(p)) and math.gcd(int(round(p)), q) == 1:
            return f"{int(round(p))}/{q}"
    return format(value, ".6g")


def human(value: Any) -> str:
    """``value`` as a person writes it, for a comment or a table: floats as :func:`_float` (``1/9`` for
    0.111..., ``4e2`` for 400.0), lists and dicts element by element, anything else as ``repr``."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(human(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{human(k)}: {human(v)}" for k, v in value.items()) + "}"
    return repr(value)


def sentences(text: str) -> list[str]:
    """``text`` cut after each full stop, question or exclamation mark that ends a sentence (not after the
    abbreviations of :data:`_ABBREVIATIONS`)."""
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        word = text[start : match.start()].rsplit(None, 1)[-1].rstrip(".!?").lower().lstrip("(")
        if word in _ABBREVIATIONS:
            continue
        out.append(text[start : match.start()].strip())
        start = match.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def paragraphs(text: str, limit: int = PARAGRAPH_CHARS) -> list[str]:
    """``text`` as paragraphs: its own (separated by blank lines), each longer than ``limit`` characters cut at
    sentence ends into paragraphs of whole sentences of about ``limit`` characters (a sentence longer than
    ``limit`` stays whole). The words are unchanged."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        block = " ".join(block.split())
        if not block:
            continue
        if len(block) <= limit:
            out.append(block)
            continue
        current = ""
        for sentence in sentences(block):
            if current and len(current) + 1 + len(sentence) > limit:
                out.append(current)
                current = sentence
            else:
                current = f"{current} {sentence}".strip()
        out.append(current)
    return out


_EMPHASIS = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*|(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])")


def inline_spans(text: str) -> list[tuple[str, str]]:
    """``text`` as ``(kind, words)`` spans of the inline markdown descriptions use: ``"code"`` (```code```),
    ``"b"`` (``**bold**``), ``"i"`` (``*italic*``) and ``"text"``; the report's template turns them into HTML."""
    out: list[tuple[str, str]] = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(("code", part))
            continue
        start = 0
        for m in _EMPHASIS.finditer(part):
            out += [("text", part[start : m.start()])] if m.start() > start else []
            out.append(("b", m.group(1)) if m.group(1) is not None else ("i", m.group(2)))
            start = m.end()
        out += [("text", part[start:])] if start < len(part) else []
    return out
