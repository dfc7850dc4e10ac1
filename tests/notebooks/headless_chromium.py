"""The report tests look at the report as a reader does: headless Chromium renders an HTML file into a PNG
(:func:`screenshot`) or says where elements lie on the page (:func:`element_boxes`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dmllab.fileio import write_text_atomic

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome executable on ``PATH`` (or ``$DMLLAB_CHROMIUM``), or None."""
    import shutil

    explicit = os.environ.get("DMLLAB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _chromium(chromium: str | None) -> str:
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium executable found (install the OS package 'chromium')")
    return chromium


def _run(chromium: str, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dmllab-chromium-") as profile_dir:
        cmd = [chromium, *_FLAGS, f"--user-data-dir={profile_dir}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def screenshot(
    page: str | os.PathLike,
    png: str | os.PathLike,
    *,
    chromium: str | None = None,
    width: int = 1280,
    height: int = 2000,
    timeout: float = 120.0,
) -> Path:
    """Render ``page`` (an HTML file) with headless Chromium into ``png``, the top ``width`` x ``height`` pixels
    of the page; return the PNG path.

    Raises:
        FileNotFoundError: no Chromium found, or it wrote no screenshot (its output is in the message).
    """
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(
        _chromium(chromium),
        [f"--screenshot={png}", f"--window-size={width},{height}", Path(page).resolve().as_uri()],
        timeout,
    )
    if not png.exists():
        raise FileNotFoundError(
            f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    return png


_MEASURE = """<script>
window.addEventListener("load", () => {
  const boxes = {};
  for (const id of %s) {
    const el = document.getElementById(id);
    if (el) { const r = el.getBoundingClientRect(); boxes[id] = [r.left, r.top, r.width, r.height]; }
  }
  const out = document.createElement("pre");
  out.id = "dmllab-boxes";
  out.textContent = JSON.stringify(boxes);
  document.body.appendChild(out);
});
</script>"""


def element_boxes(
    page: str | os.PathLike,
    ids: Sequence[str],
    *,
    chromium: str | None = None,
    width: int = 1280,
    height: int = 900,
    timeout: float = 120.0,
) -> dict[str, tuple[float, float, float, float]]:
    """``{id: (left, top, width, height)}`` in CSS pixels of the elements ``ids`` of ``page`` as Chromium lays it
    out in a ``width`` x ``height`` window, scrolled to the top (an id absent from the page is left out).

    A copy of the page beside it (so relative image links still resolve) gets a script that measures the elements
    after the load event; Chromium's ``--dump-dom`` prints the result.

    Raises:
        FileNotFoundError: no Chromium found.
        RuntimeError: Chromium printed no measurement (its output is in the message).
    """
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    script = _MEASURE % json.dumps(list(ids))
    text = text.replace("</body>", script + "</body>") if "</body>" in text else text + script
    copy = page.with_name(f".{page.stem}.measure.html")
    write_text_atomic(copy, text)
    try:
        proc = _run(
            _chromium(chromium),
            [
                f"--window-size={width},{height}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                copy.resolve().as_uri(),
            ],
            timeout,
        )
    finally:
        copy.unlink(missing_ok=True)
    found = re.search(r'<pre id="dmllab-boxes">(.*?)</pre>', proc.stdout, re.S)
    if not found:
        raise RuntimeError(f"chromium printed no measurement (exit {proc.returncode}): {proc.stderr[-2000:]}")
    import html

    return {k: tuple(v) for k, v in json.loads(html.unescape(found.group(1))).items()}
