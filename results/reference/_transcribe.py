"""Rebuild results/reference/*.csv from the plain-text papers in ../shared/papers.

The transcription reads fixed line ranges of each table and asserts the first line of every range, so a changed
paper text fails loudly instead of shifting cells. Run: `.venv/bin/python results/reference/_transcribe.py`.
"""

from __future__ import annotations

import csv
import glob
import math
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent
PAPERS = OUT.parent.parent.parent / "shared" / "papers"
COLUMNS = ["paper", "artifact", "row", "column", "dataset", "metric", "value", "note"]


def lines_of(prefix: str) -> list[str]:
    (path,) = glob.glob(str(PAPERS / f"{prefix}_*.txt"))
    return Path(path).read_text(encoding="utf-8").splitlines()


TXT = {p: lines_of(p) for p in ("000", "001", "002", "003", "004")}


def block(paper: str, first: int, last: int, expect_first: str) -> list[str]:
    """Lines first..last (1-based, inclusive); the first must start with expect_first."""
    lines = TXT[paper][first - 1 : last]
    assert lines[0].startswith(expect_first), (paper, first, lines[0][:80])
    return lines


CLEAN = [
    ("<b>", ""), ("</b>", ""), ("<u>", ""), ("</u>", ""), ("<math>", ""), ("</math>", ""),
    ("$", ""), ("\\pm", "±"), ("**", ""), ("\\alpha", "α"), ("\\rightarrow", "→"),
]


def clean(s: str) -> str:
    for a, b in CLEAN:
        s = s.replace(a, b)
    return " ".join(s.split())


CELL = re.compile(
    r"^(?P<v>[+-]?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)\s*(?:±\s*(?P<sd>\d+(?:\.\d+)?))?\s*"
    r"(?:\((?P<d>[+-]?\d+(?:\.\d+)?)\))?$"
)


def parse(cell: str):
    """-> (value, std or None, delta or None), or None for '-', 'N/A', ''."""
    c = clean(cell)
    if c in {"-", "N/A", ""}:
        return None
    m = CELL.match(c)
    if not m:
        raise ValueError(f"cannot parse cell {cell!r}")
    v = float(m["v"].replace(",", ""))
    return v, m["sd"], m["d"]


ROWS: list[dict] = []


def add(paper, artifact, row, column, dataset, metric, cell, note=""):
    p = parse(cell) if isinstance(cell, str) else (float(cell), None, None)
    if p is None:
        return
    v, sd, d = p
    notes = []
    if sd is not None:
        notes.append(f"+-{sd}")
    if d is not None:
        notes.append(f"printed delta ({d})")
    if note:
        notes.append(note)
    ROWS.append(dict(paper=paper, artifact=artifact, row=row, column=column, dataset=dataset,
                     metric=metric, value=v, note="; ".join(notes)))


def metric_of(col: str) -> str:
    col = col.strip()
    if re.fullmatch(r"\d+", col):
        return f"R@{col}"
    return col


# ----------------------------------------------------------------------------------------------- pnpp
ENH = ["prob", "scale", "cbs", "norm", "max", "fast"]


def cfg(enh: set[str]) -> str:
    return "config=" + ("+".join(e for e in ENH if e in enh) or "baseline")


def pnpp() -> None:
    P = "pnpp"
    # Table 1
    hdr = ["images", "classes", "avg", "batch size (ours)", "batch size (MS [32])", "Base lr", "Proxy lr", "cbs"]
    met = ["num_images", "num_classes", "images_per_class", "batch_size", "batch_size", "lr", "proxy_lr",
           "cbs_instances"]
    ds = {"CUB200": "cub", "Cars196": "cars", "Sop": "sop", "InShop": "inshop"}
    for ln in block("000", 142, 145, "CUB200"):
        cells = ln.split("\t")
        for h, m, c in zip(hdr, met, cells[1:], strict=True):
            note = "batch size used by MS [32], not by ProxyNCA++" if "MS" in h else ""
            add(P, "Table 1", cells[0], h, ds[cells[0]], m, c, note)
    # Table 2
    for ln in block("000", 158, 161, "Resnet18"):
        name, abbr, err = ln.split("\t")
        add(P, "Table 2", name, "Top-1 Error (%)", "imagenet", "top1_error", err, f"abbreviation={abbr}")
    # Tables 3-6
    specs = [("Table 3", 179, 191, "cub"), ("Table 4", 195, 207, "cars"), ("Table 5", 215, 226, "sop"),
             ("Table 6", 230, 240, "inshop")]
    for art, a, b, dset in specs:
        lines = block("000", a, b, "R@k")
        header = lines[0].split("\t")[1:]
        body = [ln for ln in lines[1:] if ln.strip()]
        i = 0
        while i < len(body):
            cells = body[i].split("\t")
            label = cells[0].strip()
            if i + 1 < len(body) and body[i + 1].startswith("(-max, -fast)"):
                label = label + " (-max, -fast)"
                i += 1
            label = label.replace("ProxyNCA++(-max", "ProxyNCA++ (-max")
            arch, emb = cells[-2].strip(), cells[-1].strip()
            row = f"{label} [{arch}, {emb}]"
            extra = f"arch={arch}; emb={emb}"
            if label.startswith("ProxyNCA++"):
                enh = set(ENH) - ({"max", "fast"} if "-max" in label else set())
                extra += "; " + cfg(enh)
            elif label == "ProxyNCA":
                extra += "; " + cfg(set()) + "; authors' re-implementation of ProxyNCA"
            for h, c in zip(header[:-2], cells[1:-2], strict=True):
                add(P, art, row, metric_of(h), dset, metric_of(h), c, extra)
            i += 1
    # Table 7
    lines = block("000", 252, 259, "R@k")
    header = lines[0].split("\t")[1:]
    for ln in lines[1:]:
        cells = ln.split("\t")
        label = cells[0].strip()
        enh = set(ENH) if label.startswith("ProxyNCA++") else set(ENH) - {label.lstrip("-")}
        for h, c in zip(header, cells[1:], strict=True):
            add(P, "Table 7", label, metric_of(h), "cub", metric_of(h), c, "emb=2048; " + cfg(enh))
    # Tables 8-10 (toggle ablations; column adds one enhancement)
    specs = [("Table 8", 265, 272, "prob"), ("Table 9", 276, 286, "scale"), ("Table 10", 290, 301, "max")]
    for art, a, b, toggle in specs:
        lines = block("000", a, b, "R@1")
        header = lines[0].split("\t")[1:]
        for ln in lines[1:]:
            cells = ln.split("\t")
            label = cells[0].strip()
            base = set() if label.startswith("ProxyNCA") else {t.lstrip("+") for t in label.split()}
            for j, (h, c) in enumerate(zip(header, cells[1:], strict=True)):
                enh = base | {toggle} if j == 1 else base - {toggle}
                add(P, art, label, h, "cub", "R@1", c, "emb=2048; " + cfg(enh))
    # Table 11
    lines = block("000", 305, 317, "Method")
    method = ""
    for ln in lines[1:]:
        cells = ln.split("\t")
        method = cells[0].strip() or method
        pool, r1, arch, emb = (x.strip() for x in cells[1:])
        add(P, "Table 11", f"{method} [{arch}, {emb}] {pool}", "R@1", "cub", "R@1", r1,
            f"pool={pool}; arch={arch}; emb={emb}")
    # Tables 12-13
    for art, a, b, dset in [("Table 12", 395, 403, "cub"), ("Table 13", 407, 415, "cars")]:
        lines = block("000", a, b, "R@k")
        header = lines[0].split("\t")[1:]
        for ln in lines[1:]:
            cells = ln.split("\t")
            label = cells[0].strip()
            if label.startswith("NormSoftMax"):
                extra = "emb=2048; NormSoftMax T=1/2" + (
                    "; " + "+".join(t for t in ("max", "fast") if f"+{t}" in label) if "+" in label else "")
            else:
                enh = set(ENH) - {t.lstrip("-") for t in label.split() if t.startswith("-")}
                extra = "emb=2048; " + cfg(enh)
            for h, c in zip(header, cells[1:], strict=True):
                add(P, art, label, metric_of(h), dset, metric_of(h), c, extra)
    # Tables 14-15
    dmap = {"CUB": "cub", "CARS": "cars", "SOP": "sop", "InShop": "inshop"}
    for art, a, b, crop in [("Table 14", 427, 431, 256), ("Table 15", 435, 439, 227)]:
        lines = block("000", a, b, "R@k")
        header = lines[0].split("\t")[1:]
        for ln in lines[1:]:
            cells = ln.split("\t")
            for h, c in zip(header, cells[1:], strict=True):
                add(P, art, cells[0].strip(), h, dmap[cells[0].strip()], "R@1", c,
                    f"emb=512; crop={crop}; header prints R@k, values are R@1")


# ------------------------------------------------------------------------------------------ proxy anchor
def sup(label: str) -> tuple[str, str]:
    """'MS <sup>64</sup> [34]' -> ('MS^64 [34]', '64')."""
    m = re.search(r"<sup>(\d+)</sup>", label)
    emb = m.group(1) if m else ""
    return " ".join(re.sub(r"\s*<sup>(\d+)</sup>", r"^\1", label).split()), emb


def proxy_anchor() -> None:
    P = "proxy_anchor"
    lines = block("002", 145, 161, "Clustering")
    for ln in lines:
        cells = ln.split("\t")
        row, emb = sup(cells[0])
        net = cells[1].strip()
        note = f"backbone={net}; emb={emb}" + ("; larger input images (256x256)" if row.startswith("†") else "")
        for j, c in enumerate(cells[2:]):
            grp, dset = ("CUB-200-2011", "cub") if j < 4 else ("Cars-196", "cars")
            k = [1, 2, 4, 8][j % 4]
            add(P, "Table 2", row, f"{grp} R@{k}", dset, f"R@{k}", c, note)
    for art, a, b, dset, ks in [("Table 3", 190, 205, "sop", [1, 10, 100, 1000]),
                                ("Table 4", 210, 220, "inshop", [1, 10, 20, 40])]:
        for ln in block("002", a, b, "Clustering" if art == "Table 3" else "HDC"):
            cells = ln.split("\t")
            row, emb = sup(cells[0])
            note = f"emb={emb}" + ("; larger input images (256x256)" if row.startswith("†") else "")
            for k, c in zip(ks, cells[1:], strict=True):
                add(P, art, row, f"R@{k}", dset, f"R@{k}", c, note)
    for art, a, b, groups in [("Table 5", 243, 248, [("CUB-200-2011", "cub"), ("Cars-196", "cars")]),
                              ("Table 6", 254, 260, [("SOP", "sop"), ("In-shop", "inshop")])]:
        for ln in block("002", a, b, "30"):
            cells = ln.split("\t")
            for (g, dset), c in zip(groups, cells[1:], strict=True):
                add(P, art, cells[0].strip(), f"Recall@1 {g}", dset, "R@1", c, f"batch_size={cells[0].strip()}")
    lines = block("002", 333, 339, "GoogleNet")
    net, size = "", ""
    for ln in lines:
        cells = ln.split("\t")
        net = cells[0].strip() or net
        size = cells[1].strip() or size
        for j, c in enumerate(cells[2:]):
            grp, dset = ("CUB-200-2011", "cub") if j < 4 else ("Cars-196", "cars")
            k = [1, 2, 4, 8][j % 4]
            add(P, "Table 7", f"{net} {size}", f"{grp} R@{k}", dset, f"R@{k}", c, f"backbone={net}; image size={size}; emb=512")


# ----------------------------------------------------------------------------------------- heated softmax
REFS_H = {"[1]": "Triplet semi-hard (Schroff et al. 2015)", "[2]": "Lifted structured (Song et al. 2016)",
          "[3]": "Learnable Structured Clustering (Song et al. 2017)",
          "[4]": "Deep Clustering w/o spectral learning (Law et al. 2017)",
          "[5]": "Smart Mining (Harwood et al. 2017)", "[6]": "ProxyNCA (Movshovitz-Attias et al. 2017)",
          "[7]": "FashionNet (Liu et al. 2016)", "[8]": "HDC (Yuan et al. 2017)"}


def heated() -> None:
    P = "heated_softmax"
    lines = block("003", 188, 203, "\t[1]")
    header = lines[0].split("\t")[1:]
    group, dset = "", ""
    for ln in lines[1:]:
        cells = ln.split("\t")
        if "DATASET" in cells[0]:
            group = cells[0].strip()
            dset = {"CAR196 DATASET": "cars", "CUB200 DATASET": "cub", "STANFORD PRODUCT DATASET": "sop"}[group]
            continue
        m = cells[0].strip()
        for h, c in zip(header, cells[1:], strict=True):
            note = f"{h} = {REFS_H[h]}; GoogLeNetV1" if h in REFS_H else ""
            add(P, "Table 1", f"{group} {m}", h, dset, m, c, note)
    lines = block("003", 207, 211, "\t[7]")
    header = lines[0].split("\t")[1:]
    for ln in lines[1:]:
        cells = ln.split("\t")
        for h, c in zip(header, cells[1:], strict=True):
            add(P, "Table 2", cells[0].strip(), h, "inshop", cells[0].strip(), c,
                f"{h} = {REFS_H[h]}" if h in REFS_H else "")
    lines = block("003", 221, 223, "64")
    cols = ["MODEL SM", "MODEL α = 4", "MODEL α = 8", "MODEL α = 16", "MODEL α = 32", "MODEL α = 64",
            "HBN (16 → 4)"]
    for ln in lines:
        cells = [c for c in ln.split("\t") if c.strip()]
        for h, c in zip(cols, cells[1:], strict=True):
            add(P, "Table 3", cells[0].strip(), h, "cars", "R@1", c, f"embedding_dim={cells[0].strip()}")
    lines = block("003", 363, 365, "\tSM")
    header = lines[0].split("\t")[1:]
    for ln in lines[1:]:
        cells = ln.split("\t")
        dset = {"CAR196": "cars", "CUB200": "cub"}[cells[0].strip()]
        for h, c in zip(header, cells[1:], strict=True):
            add(P, "Table 4", cells[0].strip(), h, dset, "accuracy", c,
                "fine-grained classification, all categories")
    lines = block("003", 379, 386, "LEARNED")
    cols = [("INITIAL α", "alpha_init"), ("FINAL α", "alpha_final"), ("NO HEATED-UP NMI", "NMI"),
            ("NO HEATED-UP R@1", "R@1"), ("HEATED-UP HEAT-UP α", "alpha_heated"), ("HEATED-UP NMI", "NMI"),
            ("HEATED-UP R@1", "R@1")]
    for ln in lines:
        cells = ln.split("\t")
        label = cells[0].strip() or "LEARNED α"
        row = f"{label} (INITIAL α = {cells[1].strip()})" if label == "LEARNED α" else label
        for (h, m), c in zip(cols, cells[1:], strict=True):
            add(P, "Table 5", row, h, "cars", m, c)
    lines = block("003", 400, 401, "NMI")
    cols = ["SM"] + [f"{g} α = {a}" for g in ("SM+ α", "BN w/o WN", "BN") for a in (8, 16, 32)]
    for ln in lines:
        cells = ln.split("\t")
        for h, c in zip(cols, cells[1:], strict=True):
            add(P, "Table 6", cells[0].strip(), h, "cars", cells[0].strip(), c)
    lines = block("003", 411, 412, "\t$\\alpha")
    header = [clean(h) for h in lines[0].split("\t")[1:]]
    cells = lines[1].split("\t")
    for h, c in zip(header, cells[1:], strict=True):
        add(P, "Table 7", "TRAIN ACC", h, "cars", "train_accuracy", c, f"alpha={h.split('=')[1].strip()}")


# ----------------------------------------------------------------------------------------- proxy synthesis
NUM = r"-|\d+(?:\.\d+)?"


def ws_cells(ln: str) -> list[str]:
    """Split a space-separated table line into numeric tokens, keeping '(+1.7)' deltas attached."""
    return re.findall(r"\d+(?:\.\d+)?(?:\s*±\s*\d+(?:\.\d+)?)?(?:\s*\([+-]?\d+(?:\.\d+)?\))?|(?<!\S)-(?!\S)", ln)


def lead_label(ln: str) -> str:
    m = re.match(r"^(.*?)\s+(?=\d|-\s|-$)", ln)
    return m.group(1).strip() if m else ln.strip()


def proxy_synthesis() -> None:
    P = "proxy_synthesis"
    notes1 = {"M1 (baseline)": "X̂={original emb}, P̂={original proxy}",
              "M2": "X̂={synthetic emb}, P̂={synthetic proxy}",
              "M3": "X̂={original emb}, P̂={original, synthetic proxy}",
              "M4": "X̂={synthetic emb}, P̂={original, synthetic proxy}",
              "Proxy Synthesis": "X̂={original, synthetic emb}, P̂={original, synthetic proxy}"}
    for ln in block("004", 555, 559, "M1"):
        label = re.sub(r"(\s+X)+\s+[\d.]+$", "", ln).strip()
        add(P, "Table 1", label, "R@1", "cars", "R@1", ln.split()[-1],
            notes1[label] + " (check-mark layout lost in extraction; inferred from Sec. 4.2 text)")
    for sub, a, b, sym in [("(a) Static generation", 592, 596, "λ"), ("(b) Stochastic generation", 602, 606, "α")]:
        for ln in block("004", a, b, "0."):
            x, v = ln.split()
            add(P, "Table 2", f"{sub[:3]} {sym} = {x}", "R@1(%)", "cars", "R@1", v,
                f"{sub}; PS + Norm-softmax")
    for ln in block("004", 698, 705, "Cutout"):
        label = lead_label(ln)
        cells = ws_cells(ln[len(label):])
        for h, c in zip(["Norm-softmax", "PS + Norm-softmax"], cells, strict=True):
            add(P, "Table 3", label, h, "cars", "R@1", c, "input deformation at test time")
    groups = [("CUB200", "cub"), ("CARS196", "cars"), ("SOP", "sop")]
    for ln in block("004", 754, 765, "Norm-softmax"):
        label = lead_label(ln)
        cells = ws_cells(ln[len(label):])
        assert len(cells) == 9, ln
        for j, c in enumerate(cells):
            g, dset = groups[j // 3]
            m = ["P@1", "RP", "MAP@R"][j % 3]
            add(P, "Table 4", label, f"{g} {m}", dset, m, c, "MLRC evaluation; concatenated 512-dim; 10 runs")
    cols5 = [("Softmax CARS196", "cars"), ("Softmax SOP", "sop"), ("Norm-softmax CARS196", "cars"),
             ("Norm-softmax SOP", "sop")]
    for ln in block("004", 773, 777, "Baseline"):
        label = lead_label(ln)
        cells = ws_cells(ln[len(label):])
        assert len(cells) == 4, ln
        for (h, dset), c in zip(cols5, cells, strict=True):
            add(P, "Table 5", label, h, dset, "R@1", c)
    cols6 = [("CUB200", "cub"), ("CARS196", "cars"), ("SOP", "sop"), ("In-Shop", "inshop")]
    for ln in block("004", 817, 832, "Softmax"):
        label = lead_label(ln)
        cells = ws_cells(ln[len(label):])
        for (h, dset), c in zip(cols6, cells, strict=True):
            add(P, "Table 6", label, h, dset, "R@1", c,
                "conventional evaluation" + ("; † exceptional setting (supp. C.2)" if "†" in label else ""))
    # Table A
    for ln in block("004", 1622, 1627, "0.0"):
        t = ln.split()
        add(P, "Table A", f"µ = {t[0]}", "Time(ms) Generation", "cars", "time_ms", t[1], "batch size N=128")
        add(P, "Table A", f"µ = {t[0]}", "Time(ms) Loss", "cars", "time_ms", t[2], "batch size N=128")
    # Table B
    for sub, a, b, loss in [("(a)", 1686, 1703, "NS"), ("(b)", 1710, 1727, "PN")]:
        for ln in block("004", a, b, "0.10"):
            t = ws_cells(ln)
            assert len(t) == 5, ln
            cols = [f"Train {loss}", f"Train PS + {loss}", f"Test {loss}", f"Test PS + {loss}"]
            for h, c in zip(cols, t[1:], strict=True):
                add(P, "Table B", f"{sub} λ = {t[0]}", h, "cars", "R@1", c,
                    f"{sub} {'Norm-softmax' if loss == 'NS' else 'Proxy-NCA'} loss; embedding deformation")
    # Table C
    starts = {"(a) Cifar10": ("cifar10", 0), "(b) Cifar100": ("cifar100", 0), "(c) SVHN": ("svhn", 0),
              "(d) TinyImagenet": ("tinyimagenet", 0)}
    lines = TXT["004"][1760:1809]
    subs = [i for i, ln in enumerate(lines) if ln.strip() in starts]
    assert len(subs) == 4, subs
    for i in subs:
        name = lines[i].strip()
        dset = starts[name][0]
        body = [ln for ln in lines[i - 6 : i] if re.match(r"^\d", ln)]
        hdr = [ln for ln in lines[i - 9 : i] if ln.startswith("µ ")]
        assert len(body) == 4 and len(hdr) == 1, (name, body, hdr)
        cols = hdr[0].split()[1:]
        for ln in body:
            t = ln.split()
            for h, c in zip(cols, t[1:], strict=True):
                add(P, "Table C", f"{name} {t[0]}", h, dset, "accuracy", c,
                    "diagonal header 'α / µ': the extraction does not say which axis is α (rows 0.4-2.0, "
                    "columns 0.25-1.00); PreActResNet18")
    lines = block("004", 1815, 1818, "Cifar10")
    colsD = ["Baseline", "Virtual Softmax", "Input Mixup", "Manifold Mixup", "Proxy Synthesis"]
    for ln in lines:
        label = ln.split()[0]
        cells = ws_cells(ln[len(label):])
        for h, c in zip(colsD, cells, strict=True):
            add(P, "Table D", label, h, label.lower(), "accuracy", c, "softmax loss; PreActResNet18")
    colsE = [("CARS196 Input", "cars"), ("CARS196 Manifold", "cars"), ("SOP Input", "sop"),
             ("SOP Manifold", "sop")]
    for sub, a, b, loss in [("(a)", 1861, 1866, "Softmax loss"), ("(b)", 1873, 1878, "Norm-softmax loss")]:
        for ln in block("004", a, b, "0.3"):
            t = ln.split()
            for (h, dset), c in zip(colsE, t[1:], strict=True):
                add(P, "Table E", f"{sub} α = {t[0]}", h, dset, "R@1", c, f"{sub} {loss}; Mixup α search")
    # Tables F, H, J, L (conventional, Recall@k)
    for art, cap, dset in [("Table F", 1986, "cub"), ("Table H", 2067, "cars"), ("Table J", 2148, "sop"),
                           ("Table L", 2220, "inshop")]:
        lines = TXT["004"][cap - 60 : cap - 1]
        (hi,) = [i for i, ln in enumerate(lines) if ln.startswith("T Method Net Dim")]
        ks = re.findall(r"R@(\d+)", lines[hi])
        for ln in lines[hi + 1 :]:
            m = re.match(r"^(?P<label>.+?) (?P<net>G|R50|BN|V16) (?P<dim>\d+) (?P<rest>.*)$", ln)
            if ln.startswith("PS: "):
                label = ln.split(" - ")[0].strip()
                deltas = re.findall(r"\(([+-]?\d+\.\d+)\)", ln)
                assert len(deltas) == 4, ln
                for k, d in zip(ks, deltas, strict=True):
                    add(P, art, label, f"R@{k}", dset, f"delta_R@{k}", d,
                        "boost of PS over its base loss, as printed")
                continue
            if not m:
                continue
            toks = m["rest"].split()
            pairs, j = [], 0
            while j < len(toks):
                pairs.append((toks[j], toks[j + 1]))
                j += 2
            assert len(pairs) == 4, ln
            for k, (v, d) in zip(ks, pairs, strict=True):
                cell = v if d == "-" or v == "-" else f"{v} {d}"
                add(P, art, m["label"], f"R@{k}", dset, f"R@{k}", cell,
                    f"net={m['net']}; dim={m['dim']}; conventional evaluation")
    # Tables G, I, K (MLRC)
    for art, cap, dset in [("Table G", 2008, "cub"), ("Table I", 2089, "cars"), ("Table K", 2170, "sop")]:
        lines = TXT["004"][cap - 16 : cap - 1]
        body = [ln for ln in lines if re.search(r"±", ln)]
        assert len(body) == 12, (art, len(body))
        for ln in body:
            label = lead_label(ln)
            cells = ws_cells(ln[len(label):])
            assert len(cells) == 6, ln
            for j, c in enumerate(cells):
                grp = "Concatenated (512-dim)" if j < 3 else "Separated (128-dim)"
                m = ["P@1", "RP", "MAP@R"][j % 3]
                add(P, art, label, f"{grp} {m}", dset, m, c, "MLRC evaluation; 10 runs")


def main() -> int:
    pnpp()
    proxy_anchor()
    heated()
    proxy_synthesis()
    OUT.mkdir(parents=True, exist_ok=True)
    names = {"pnpp": "pnpp.csv", "proxy_anchor": "proxy_anchor.csv", "heated_softmax": "heated_softmax.csv",
             "proxy_synthesis": "proxy_synthesis.csv"}
    keys = set()
    for r in ROWS:
        k = (r["paper"], r["artifact"], r["row"], r["column"])
        assert k not in keys, k
        keys.add(k)
        assert math.isfinite(r["value"])
    for paper, fname in names.items():
        with open(OUT / fname, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in ROWS:
                if r["paper"] == paper:
                    w.writerow({**r, "value": repr(r["value"])})
    from collections import Counter

    c = Counter((r["paper"], r["artifact"]) for r in ROWS)
    for k in sorted(c, key=lambda k: (k[0], len(k[1]), k[1])):
        print(k, c[k])
    print("total", len(ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
