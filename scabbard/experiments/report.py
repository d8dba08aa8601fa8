"""The report of a ``reproduce`` run: every executed notebook rendered to HTML, and an index.

* :func:`render_notebook` - an executed notebook as HTML beside it (nbconvert, the lab
  template): its tables, its figures inline (PNG), its interactive charts (Altair; the
  Vega libraries are inlined, so the file opens offline).
* :func:`write_index` - ``index.html``: the machine and the date, then per notebook its
  status and time, the notes it printed about a skipped peer, its key table (the first
  table it shows) and every figure it saved, subfolders included, inline; links to the
  notebook's HTML, the notebook itself, its interactive charts and its CSV files.
* :func:`machine` - what the machine is and how busy it was (the figures measure it).
"""

from __future__ import annotations

import html
import os
import platform
import subprocess
import sys
from datetime import datetime
from pathlib import Path

FIGURES = (".png", ".svg")
NOTE_WORDS = ("skipped", "not installed")  # a printed line with these is a visible note


def render_notebook(notebook: Path) -> Path:
    """``notebook`` (executed) as ``<name>.html`` beside it, figures inline."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = _without_widgets(nbformat.read(notebook, as_version=4))
    body, _ = HTMLExporter(template_name="lab", embed_images=True).from_notebook_node(nb)
    out = notebook.with_suffix(".html")
    out.write_text(body, encoding="utf-8")
    return out


WIDGET = "application/vnd.jupyter.widget-view+json"


def _without_widgets(nb):
    """The notebook with each widget output (a live panel: it needs a kernel) replaced by a
    line saying what it is and where it runs, so the static page shows no empty box."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET in data:
                data.pop(WIDGET)
                data["text/html"] = ("<p class='scabbard-widget'><em>An interactive panel (a "
                                     "widget): it runs live when the notebook is opened in "
                                     "JupyterLab, not in this page.</em></p>")
                data.pop("text/plain", None)
    nb.metadata.pop("widgets", None)
    return nb


def machine() -> dict:
    """This machine and its load now: CPU, cores, memory, OS, Python, load averages."""
    info = {"date": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "host": platform.node(), "os": f"{platform.system()} {platform.release()}",
            "python": sys.version.split()[0], "cores": os.cpu_count()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in cpu.splitlines()
                           if line.startswith("model name"))
    except (OSError, StopIteration):
        info["cpu"] = platform.processor() or "unknown"
    try:
        kib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal")))
        info["memory_gb"] = round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    if hasattr(os, "getloadavg"):
        info["load"] = tuple(round(x, 2) for x in os.getloadavg())
    info["commit"] = _commit()
    return info


def _commit() -> str:
    from scabbard import __version__, paths

    try:
        out = subprocess.run(["git", "-C", str(paths.home()), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return f"scabbard {__version__}, commit {out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"scabbard {__version__}"


def key_table(notebook: Path, limit_chars: int = 60_000) -> str:
    """The first table the executed notebook shows (a DataFrame's HTML), or ''."""
    import nbformat

    if not notebook.is_file():
        return ""
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/html", "")
            text = "".join(text) if isinstance(text, list) else text
            if "<table" in text and "dataframe" in text and len(text) <= limit_chars:
                return text
    return ""


def notes(notebook: Path) -> list[str]:
    """The lines an executed notebook printed about what it skipped (a peer not installed)."""
    import nbformat

    if not notebook.is_file():
        return []
    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                found += [line.strip() for line in "".join(out.get("text", "")).splitlines()
                          if any(w in line.lower() for w in NOTE_WORDS)]
    return found


def figures(folder: Path) -> list[Path]:
    """Every figure a notebook saved in its folder, subfolders included."""
    return sorted(p for p in folder.rglob("*") if p.suffix in FIGURES) if folder.is_dir() else []


def _link(path: Path, run_dir: Path, text: str | None = None) -> str:
    rel = html.escape(str(path.relative_to(run_dir)))
    return f'<a href="{rel}">{html.escape(text or path.name)}</a>'


def _machine_html(before: dict, after: dict) -> str:
    load = (f"load average (1, 5, 15 min) {before.get('load')} at the start, "
            f"{after.get('load')} at the end, on {before['cores']} cores"
            if before.get("load") else "")
    rows = [("date", f"{before['date']} to {after['date']}"),
            ("machine", f"{before['cpu']}, {before['cores']} cores, "
                        f"{before.get('memory_gb', '?')} GB, {before['os']} ({before['host']})"),
            ("load", load), ("software", f"Python {before['python']}, {before['commit']}")]
    return "<table class='machine'>" + "".join(
        f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows if v) + "</table>"


_STYLE = """<style>
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h2{border-top:1px solid #ccc;padding-top:1em} table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right} .machine td{text-align:left}
.fig{display:inline-block;margin:6px;vertical-align:top;max-width:100%}
.fig img{max-width:100%;border:1px solid #eee} .fig p{font-size:12px;margin:2px}
.key{max-height:420px;overflow:auto;margin:8px 0} .failed{color:#b00} .note{color:#a60}
</style>"""


def write_index(run_dir: Path, scale: str, results, experiments: dict, before: dict,
                after: dict) -> Path:
    """The report's front page, ``run_dir/index.html``."""
    toc, sections = [], []
    for r in results:
        folder = r.output.parent
        rendered = r.output.with_suffix(".html")
        status = "ok" if r.ok else f"<span class='failed'>FAILED: {html.escape(r.error)}</span>"
        title = html.escape(experiments[r.name].title)
        toc.append(f"<li><a href='#{r.name}'>{r.name}</a>: {title} - {status}, "
                   f"{r.seconds:.0f} s</li>")
        links = [_link(rendered, run_dir, "notebook (HTML)")] if rendered.is_file() else []
        if r.output.is_file():
            links.append(_link(r.output, run_dir, "notebook (.ipynb)"))
        extra = sorted(p for p in folder.rglob("*.html") if p != rendered)
        links += [_link(p, run_dir, f"interactive: {p.relative_to(folder)}") for p in extra]
        links += [_link(p, run_dir, str(p.relative_to(folder)))
                  for p in sorted(folder.rglob("*.csv"))]
        parts = [f"<h2 id='{r.name}'>{r.name}: {title}</h2>",
                 f"<p>{status} &middot; {r.seconds:.0f} s &middot; {' &middot; '.join(links)}</p>"]
        parts += [f"<p class='note'>note: {html.escape(n)}</p>" for n in notes(r.output)]
        table = key_table(r.output)
        if table:
            parts.append(f"<div class='key'>{table}</div>")
        for fig in figures(folder):
            rel = html.escape(str(fig.relative_to(run_dir)))
            parts.append(f"<div class='fig'><a href='{rel}'><img src='{rel}'></a>"
                         f"<p>{html.escape(str(fig.relative_to(folder)))}</p></div>")
        sections.append("\n".join(parts))
    n_ok = sum(r.ok for r in results)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>scabbard reproduce "
            f"{html.escape(run_dir.name)}</title>{_STYLE}</head><body>"
            f"<h1>Scabbard workbench: the paper's figures reproduced</h1>"
            f"<p>run {html.escape(run_dir.name)}, scale <b>{scale}</b>: {n_ok} of "
            f"{len(results)} notebooks ran; "
            f"{_link(run_dir / 'results.csv', run_dir, 'every results table')}"
            f" in one CSV.  The throughput figures measure this machine as it was during the "
            f"run (see its load below).</p>{_machine_html(before, after)}"
            f"<ul>{''.join(toc)}</ul>{''.join(sections)}</body></html>")
    out = run_dir / "index.html"
    out.write_text(page, encoding="utf-8")
    return out


def gallery(run_dirs, out_dir: Path, width: int = 900, colors: int = 128) -> list[Path]:
    """Every figure of the runs' notebooks as a small PNG in ``out_dir`` (for the README):
    ``<notebook>--<figure>.png``, at most ``width`` pixels wide, ``colors`` colours (a
    palette PNG is a tenth of the size).  A notebook in several runs: the first run's."""
    from PIL import Image

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, seen = [], set()
    for run in map(Path, run_dirs):
        for folder in sorted(p for p in run.iterdir() if p.is_dir()):
            if folder.name in seen or not figures(folder):
                continue
            seen.add(folder.name)
            for fig in figures(folder):
                if fig.suffix != ".png":
                    continue
                name = "--".join((folder.name, *fig.relative_to(folder).with_suffix("").parts))
                img = Image.open(fig).convert("RGB")
                if img.width > width:
                    img = img.resize((width, round(img.height * width / img.width)),
                                     Image.LANCZOS)
                target = out_dir / f"{name}.png"
                img.quantize(colors).save(target, optimize=True)
                written.append(target)
    return written
