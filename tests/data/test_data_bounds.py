"""Files the data layer reads must be regular files (a FIFO listed as an image, an index file that is a FIFO or a
device, ``--from`` a process substitution: a named error, never a hang), index values have bounds (a box of 2**40,
an id beyond 64 bits), and a codec error names the file, the line and the byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmllab.data.base import ImageLoadError
from dmllab.data.index import IndexFileError, cub_box, parse_int, read_lines
from dmllab.data.real import load_image


def test_an_image_that_is_a_fifo_is_a_named_error_not_a_hang(tmp_path):
    fifo = tmp_path / "bird.jpg"
    os.mkfifo(fifo)
    with pytest.raises(ImageLoadError, match=rf"image file {fifo} is a FIFO"):
        load_image(fifo)
    with pytest.raises(ImageLoadError, match="image file is missing"):
        load_image(tmp_path / "gone.jpg")


def test_an_index_file_that_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "images.txt"
    os.mkfifo(fifo)
    with pytest.raises(IndexFileError, match="is a FIFO"):
        read_lines(fifo)
    with pytest.raises(IndexFileError, match="is a character device"):
        read_lines(Path("/dev/zero"))


def test_a_non_utf8_index_file_names_the_line_and_the_byte(tmp_path):
    path = tmp_path / "images.txt"
    path.write_bytes(b"1 a/1.jpg\n2 b/\xe92.jpg\n")
    with pytest.raises(IndexFileError, match=r"images.txt, line 2: not UTF-8 text \(byte 14: b'\\xe9'\)"):
        read_lines(path)


@pytest.mark.parametrize(
    "box", [["0", "0", str(2**40), "10"], ["1e300", "0", "5", "5"], ["0", "0", "0", "5"]]
)
def test_a_box_out_of_any_image_is_refused(tmp_path, box):
    with pytest.raises(IndexFileError, match=r"line 3: box .* must be numbers within ±65536"):
        cub_box(box, tmp_path / "bounding_boxes.txt", 3)
    assert cub_box(["1", "2", "30.5", "40"], tmp_path / "b.txt", 1) == [1.0, 2.0, 30.5, 40.0]


def test_an_id_beyond_64_bits_is_refused(tmp_path):
    with pytest.raises(IndexFileError, match="line 4: image id 1180591620717411303424 is beyond 64 bits"):
        parse_int(str(2**70), tmp_path / "images.txt", 4, "image id")


def test_from_a_process_substitution_says_why_it_cannot_be_read(tmp_path):
    """``dmllab data fetch cub ROOT --from <(cat archive)``: /dev/fd/N is a pipe, refused with the reason."""
    code = (
        "import sys\n"
        "from dmllab.data.fetch import fetch_dataset, FetchError\n"
        "try:\n"
        f"    fetch_dataset('cub', {str(tmp_path / 'root')!r}, archives=[sys.argv[1]])\n"
        "except FetchError as err:\n"
        "    print(err)\n"
    )
    script = f'exec {sys.executable} -c "$0" <(echo not-an-archive)'
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(["bash", "-c", script, code], capture_output=True, text=True, env=env, timeout=120)
    assert "is a FIFO (named pipe), not a regular file; an archive is read twice" in out.stdout, out.stderr
    assert not (tmp_path / "root").exists()


def test_a_zip_member_name_that_is_not_utf8_names_the_archive_and_the_byte(tmp_path):
    import io
    import struct
    import zipfile

    from dmllab.data.fetch import FetchError
    from dmllab.data.sources import Archive
    from dmllab.data.unpack import unpack

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("CUB/b.jpg", b"y")
    raw = bytearray(buf.getvalue())
    for at in (i for i in range(len(raw)) if raw.startswith(b"CUB/b.jpg", i)):
        raw[at + 4] = 0xFF  # a byte that is not UTF-8
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # flag the names as UTF-8
        at = raw.find(signature)
        while at != -1:
            struct.pack_into("<H", raw, at + offset, struct.unpack_from("<H", raw, at + offset)[0] | 0x800)
            at = raw.find(signature, at + 1)
    path = tmp_path / "a.zip"
    path.write_bytes(bytes(raw))
    archive = Archive(filename="a.zip", url=None, md5=None, sha256=None, source="test", place="")
    with pytest.raises(
        FetchError, match=rf"cannot unpack {path}: a member's name is not UTF-8 \(byte 4 of the name"
    ):
        unpack(archive, path, tmp_path / "staging")
