"""The figures and the Markdown of ``memwarden bench report`` (``benchmarks/report.py``):
matplotlib, drawn without a display, one PNG a figure, each stamped with its machine and
command as the Markdown beside it is."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
import msgspec

mpl.use("Agg")  # files only: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from benchmarks.footprint import FootprintReport
from benchmarks.report import BEGIN, END, REFERENCE, ReportRun, SearchEvidence

LANES = ("lexical", "vector", "hybrid")
DPI = 110


_QUICK = "   (--quick: a smoke test, not a measurement)"


def _stamp(figure: Figure, run: ReportRun) -> None:
    """The machine and the command, in small print under the plot."""
    figure.text(
        0.01,
        0.01,
        "\n".join(
            textwrap.wrap(run.machine.describe(), 150) + textwrap.wrap(run.command + _QUICK * run.quick, 150)
        ),
        fontsize=6.5,
        color="#555555",
        va="bottom",
    )


def _save(figure: Figure, run: ReportRun, path: Path) -> Path:
    _stamp(figure, run)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def _shown(search: SearchEvidence) -> list[str]:
    """The lanes and the deepest reranked configuration (the default)."""
    reranked = [c.name for c in search.configurations if c.name.startswith("reranked")]
    return [*LANES, *reranked[-1:]]


def latency_figure(run: ReportRun, path: Path) -> Path:
    search = run.search
    names = [c.name for c in search.configurations]
    figure, axes = plt.subplots(figsize=(8, 4.6))
    axes.boxplot(
        [search.latencies_ms[n] or [float("nan")] for n in names],
        tick_labels=names,
        showfliers=True,
        flierprops={"markersize": 2, "alpha": 0.4},
    )
    axes.set_yscale("log")
    axes.set_ylabel("search latency, ms (log scale)")
    reference = next(c for c in search.configurations if c.name == REFERENCE)
    axes.axhline(
        reference.p50_ms, color="#2b7bba", linestyle="--", linewidth=1, label=f"{REFERENCE} p50 (reference)"
    )
    for index, configuration in enumerate(search.configurations, start=1):
        axes.annotate(
            f"{configuration.p50_ms:.0f}",
            (index, configuration.p50_ms),
            xytext=(9, 0),
            textcoords="offset points",
            fontsize=7,
            va="center",
        )
    axes.set_title(f"Search latency per configuration ({search.questions} LoCoMo questions, in-process)")
    axes.legend(fontsize=8, loc="upper left")
    return _save(figure, run, path)


def category_figure(run: ReportRun, path: Path) -> Path:
    search = run.search
    shown = _shown(search)
    labels = list(dict.fromkeys(c.category for c in search.categories))
    width = 0.8 / len(shown)
    figure, axes = plt.subplots(figsize=(8, 4.6))
    for offset, name in enumerate(shown):
        values = {c.category: c.recall_at10 for c in search.categories if c.configuration == name}
        positions = [i + (offset - (len(shown) - 1) / 2) * width for i in range(len(labels))]
        axes.bar(positions, [values.get(label, 0.0) for label in labels], width, label=name)
    counts = {c.category: c.questions for c in search.categories}
    axes.set_xticks(range(len(labels)), [f"{label}\n({counts[label]} q.)" for label in labels], fontsize=8)
    axes.set_ylim(0, 1.15)  # room for the legend above the bars
    axes.set_ylabel("evidence recall@10")
    axes.set_title("Recall by category per lane (reference: the hybrid driver without a reranker)")
    axes.legend(fontsize=8, ncols=len(shown), loc="upper center")
    return _save(figure, run, path)


def tradeoff_figure(run: ReportRun, path: Path) -> Path:
    search = run.search
    figure, axes = plt.subplots(figsize=(8, 4.6))
    for index, configuration in enumerate(search.configurations):
        marker = "*" if configuration.name == REFERENCE else "o"
        axes.scatter(configuration.p50_ms, configuration.recall_at10, marker=marker, s=60, zorder=3)
        axes.scatter(
            configuration.p50_ms,
            configuration.recall_at5,
            marker=marker,
            s=40,
            facecolors="none",
            edgecolors="#777777",
            zorder=3,
        )
        axes.annotate(
            configuration.name,
            (configuration.p50_ms, configuration.recall_at10),
            xytext=(5, 6 if index % 2 else -11),  # alternately above and below: close points
            textcoords="offset points",
            fontsize=8,
        )
    curve = [c for c in search.configurations if c.name == REFERENCE or c.name.startswith("reranked")]
    axes.plot(
        [c.p50_ms for c in curve], [c.recall_at10 for c in curve], color="#999999", linewidth=1, zorder=2
    )
    axes.set_xscale("log")
    axes.set_xlabel("search p50, ms (log scale)")
    axes.set_ylabel("evidence recall (filled: @10, hollow: @5)")
    axes.set_title("Recall against p50 (line: the hybrid driver, then reranked deeper)")
    return _save(figure, run, path)


def ingest_figure(run: ReportRun, path: Path) -> Path:
    ingest = run.ingest
    bars: list[tuple[str, float]] = []
    if ingest.embedder_alone is not None:
        bars.append((f"embedder alone\n({ingest.embedder_alone.model})", ingest.embedder_alone.per_second))
    bars += [
        (f"write_batch over HTTP\n(embedder {ingest.ingest.embedder})", ingest.ingest.per_second),
        ("write_batch over HTTP\n(no embedder: plain ledger)", ingest.plain_ledger.per_second),
    ]
    figure, axes = plt.subplots(figsize=(8, 3.6))
    colours = ["#999999", "#2b7bba", "#7fb27f"][-len(bars) :]
    axes.barh([label for label, _ in bars], [rate for _, rate in bars], color=colours)
    for index, (_, rate) in enumerate(bars):
        axes.annotate(
            f"{rate:.0f}/s", (rate, index), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8
        )
    axes.invert_yaxis()
    axes.margins(x=0.12)  # room for the last bar's label
    axes.tick_params(axis="y", labelsize=8)
    axes.set_xlabel(f"memories per second, searchable ({ingest.turns} LoCoMo turns)")
    ratio = (
        f"\ningest / embedder alone: {ingest.ratio:.0%} (target {ingest.target:.0%})" if ingest.ratio else ""
    )
    axes.set_title(f"Ingest against the embedder alone (reference){ratio}", fontsize=10)
    return _save(figure, run, path)


def footprint_figure(run: ReportRun, path: Path, footprint: FootprintReport) -> Path:
    figure, axes = plt.subplots(figsize=(8, 3.8))
    moments = ("after start", f"after {footprint.writes} writes")
    bottoms = [0.0, 0.0]
    for process in footprint.processes:
        values = [process.after_start_mb, process.after_writes_mb]
        axes.bar(moments, values, bottom=bottoms, label=process.process)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    axes.axhline(
        footprint.target_mb,
        color="#c0392b",
        linestyle="--",
        linewidth=1,
        label=f"target {footprint.target_mb:.0f} MB",
    )
    for index, total in enumerate(bottoms):
        axes.annotate(
            f"{total:.0f} MB",
            (index, total),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    axes.set_ylabel("resident memory (RSS), MB")
    axes.set_title("serve, its projector and a worker, together")
    axes.legend(fontsize=8)
    return _save(figure, run, path)


# -- the Markdown ---------------------------------------------------------------------------------------


def _image(out: Path, image: Path, alt: str) -> str:
    return f"![{alt}]({Path(os.path.relpath(image, out.parent)).as_posix()})"


def _search_tables(search: SearchEvidence) -> list[str]:
    reference = next(c for c in search.configurations if c.name == REFERENCE)
    lines = [
        "| configuration | recall@5 | recall@10 | p50 ms | p95 ms | p50 / reference |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in search.configurations:
        ratio = c.p50_ms / reference.p50_ms if reference.p50_ms else float("nan")
        lines.append(
            f"| {c.name} | {c.recall_at5:.3f} | {c.recall_at10:.3f} | {c.p50_ms:.1f} | {c.p95_ms:.1f} | {ratio:.1f}x |"
        )
    return lines


def _category_table(search: SearchEvidence) -> list[str]:
    shown = _shown(search)
    labels = list(dict.fromkeys(c.category for c in search.categories))
    recall = {(c.configuration, c.category): c.recall_at10 for c in search.categories}
    counts = {c.category: c.questions for c in search.categories}
    lines = [f"| category (questions) | {' | '.join(shown)} |", "| --- |" + " ---: |" * len(shown)]
    for label in labels:
        cells = " | ".join(f"{recall.get((name, label), 0.0):.3f}" for name in shown)
        lines.append(f"| {label} ({counts[label]}) | {cells} |")
    return lines


def markdown(run: ReportRun, out: Path, images: dict[str, Path]) -> str:
    search, ingest = run.search, run.ingest
    lines = [
        BEGIN,
        "",
        "## Report: search, ingest and footprint",
        "",
        f"Command: `{run.command}`. Machine: {run.machine.describe()}."
        + (
            " **`--quick`: a smoke test of the report's path; these figures are not measurements.**"
            if run.quick
            else ""
        ),
        f"Search: {search.questions} questions of {search.conversations} LoCoMo conversations ({search.turns} turns,"
        f" `{search.data}`), embedder {search.embedder}, reranker {search.reranker or 'none'}, in-process (no HTTP),"
        " the query embedded on every call. Every configuration answered the same questions in the same run;"
        f" the reference is `{REFERENCE}`, the driver without a reranker.",
        "",
        "### Search latency per configuration",
        "",
        _image(out, images["latency"], "search latency per configuration"),
        "",
        *_search_tables(search),
        "",
        "### Recall by category per lane (recall@10)",
        "",
        _image(out, images["categories"], "recall by category per lane"),
        "",
        *_category_table(search),
        "",
        "### Recall against p50",
        "",
        _image(out, images["tradeoff"], "recall against p50"),
        "",
        "Each point is one configuration of the table above; the line runs from the hybrid driver"
        " (reference) through the reranked depths.",
        "",
        "### Ingest against the embedder alone",
        "",
        _image(out, images["ingest"], "ingest against the embedder alone"),
        "",
    ]
    if ingest.embedder_alone is not None:
        lines.append(
            f"Same run, same {ingest.turns} turns: the embedder alone {ingest.embedder_alone.per_second:.1f}/s"
            f" (reference), `write_batch` over HTTP {ingest.ingest.per_second:.1f}/s searchable"
            f" ({ingest.ratio:.0%} of it; target {ingest.target:.0%}), the plain ledger {ingest.plain_ledger.per_second:.1f}/s."
        )
    footprint = run.footprint
    if footprint is not None and "footprint" in images:
        lines += [
            "",
            "### Footprint",
            "",
            _image(out, images["footprint"], "resident memory of serve, its projector and a worker"),
            "",
            f"| process | after start MB | after {footprint.writes} writes MB |",
            "| --- | ---: | ---: |",
            *(
                f"| {p.process} | {p.after_start_mb:.0f} | {p.after_writes_mb:.0f} |"
                for p in footprint.processes
            ),
            f"| together (target {footprint.target_mb:.0f}) | {footprint.after_start_mb:.0f} | {footprint.after_writes_mb:.0f} |",
            "",
            f"Worker: {footprint.worker}. `memwarden --help` {footprint.help_seconds:.2f} s,"
            f" `memwarden keys list` {footprint.keys_list_seconds:.2f} s (median of 5)."
            + (
                f" A plain `pip install .` puts {footprint.install.total_mb:.0f} MB in site-packages; largest: "
                + ", ".join(f"{d.name} {d.mb:.0f} MB" for d in footprint.install.largest[:6])
                + "."
                if footprint.install is not None
                else ""
            ),
        ]
    lines += ["", END]
    return "\n".join(lines)


def _spliced(existing: str, section: str) -> str:
    """``existing`` with its report section replaced (or the section added at its end)."""
    if BEGIN in existing and END in existing:
        head, _, rest = existing.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + section + tail
    return existing.rstrip("\n") + "\n\n" + section + "\n"


def write_report(run: ReportRun, out: Path, image_dir: Path) -> list[Path]:
    """The PNGs into ``image_dir`` and the section into ``out``; the PNGs written."""
    image_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, tuple[str, Callable[[ReportRun, Path], Path]]] = {
        "latency": ("search-latency.png", latency_figure),
        "categories": ("recall-by-category.png", category_figure),
        "tradeoff": ("recall-vs-p50.png", tradeoff_figure),
        "ingest": ("ingest.png", ingest_figure),
    }
    images = {key: draw(run, image_dir / name) for key, (name, draw) in figures.items()}
    if run.footprint is not None:
        images["footprint"] = footprint_figure(run, image_dir / "footprint.png", run.footprint)
    # What was measured, beside the figures: they can be read again without a rerun.
    (image_dir / "report.json").write_bytes(msgspec.json.format(msgspec.json.encode(run)) + b"\n")
    existing = out.read_text() if out.is_file() else "# Benchmarks\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_spliced(existing, markdown(run, out, images)))
    return list(images.values())
