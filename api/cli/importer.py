"""`memwarden import PATH`: memories from a file or a folder, through ``write_batch``'s
service path in batches of up to 256 (so every item is decided, deduplicated, superseded
and audited exactly as a batch over HTTP is).

Formats, chosen by the path:

- ``*.jsonl`` / ``*.ndjson``: one ``write`` body (a JSON object) per line; blank lines skipped.
- ``*.csv``: a header row naming write fields (``provenance.source`` and
  ``provenance.ref`` for the provenance); ``tags`` and ``selectors`` are separated by
  ``;``; an empty cell is an absent field.
- a folder: every ``*.md`` file under it (hidden ones aside) is **one memory**: its body
  is the content, its YAML front matter (between ``---`` lines) the other write fields
  (a bare date such as ``event_time: 2026-03-01`` means midnight UTC). One memory per
  file rather than per paragraph, because the front matter describes the whole file: a
  slot (``subject``/``attribute``/``value``) or a ``provenance.ref`` copied onto each
  paragraph would make the paragraphs supersede one another.

A record that cannot be read (malformed JSON, an unknown field, a bad time, NUL) is
rejected with its line number (or file name) and never stops the import. Re-running
an import is safe: what was stored before deduplicates. A small progress file in the
data directory (``imports/``) remembers how many records of an unchanged source are
done, so a resumed run skips them without asking the ledger.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime
from datetime import time as clock_time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import msgspec

from memwarden.api.cli.knowledge import OPERATOR, publisher
from memwarden.domain.model.errors import DomainError, InvalidRequest
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.model.write import MAX_BATCH_ITEMS, Rejection

if TYPE_CHECKING:  # the services, the HTTP schemas and YAML only when an import runs (api/cli/main.py)
    from memwarden.domain.services.memory import MemoryService
    from memwarden.domain.services.write_results import BatchItem, WriteResult

MAX_MARKDOWN_BYTES = 1_048_576
"""A Markdown file larger than this is refused unread (the content limit is far below)."""
LIST_FIELDS = frozenset({"tags", "selectors"})
SHOWN_REJECTIONS = 20
"""Without a terminal, a progress line at every tenth of the records."""


class Record(msgspec.Struct, frozen=True):
    """One record of the source: a write body, or why it could not be read."""

    where: str
    body: dict[str, Any] | None = None
    problem: str | None = None


class ImportRejection(msgspec.Struct, frozen=True):
    where: str
    reason: str
    detail: str


class ImportSummary(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    namespace: str
    actor: str
    records: int
    skipped: int
    """Records a previous run of the same, unchanged source had already done."""
    outcomes: dict[str, int]
    rejections: list[ImportRejection]
    """The first ``SHOWN_REJECTIONS`` rejected records, in order."""
    seconds: float


# -- reading the source ----------------------------------------------------------------------------


def read_source(path: Path) -> tuple[list[Record], str]:
    """The records of ``path`` and a fingerprint of its bytes (for resuming)."""
    if path.is_dir():
        return _markdown_records(path)
    data = path.read_bytes()
    fingerprint = hashlib.sha256(data).hexdigest()
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".ndjson"}:
        return list(_jsonl_records(data)), fingerprint
    if suffix == ".csv":
        return list(_csv_records(data)), fingerprint
    raise InvalidRequest(f"{path.name}: give a .jsonl, .ndjson or .csv file, or a folder of .md files")


def _jsonl_records(data: bytes) -> Iterator[Record]:
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            # the standard library reads a lone surrogate escape: it rejects its record alone
            body = json.loads(line)
        except (ValueError, RecursionError) as error:
            yield Record(where, problem=f"malformed JSON: {error}")
            continue
        if isinstance(body, dict):
            yield Record(where, body)
        else:
            yield Record(where, problem="not a JSON object")


def _csv_records(data: bytes) -> Iterator[Record]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"the CSV file is not UTF-8 text (byte {error.start})") from error
    reader = csv.DictReader(text.splitlines(keepends=True))
    for row in reader:
        where = f"line {reader.line_num}"
        try:
            yield Record(where, _csv_body(row))
        except InvalidRequest as error:
            yield Record(where, problem=error.detail)


def _csv_body(row: dict[str | Any, str | Any]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for column, cell in row.items():
        if column is None:
            raise InvalidRequest("more cells than the header has columns")
        if cell is None or cell == "":
            continue
        if column in LIST_FIELDS:
            body[column] = [part.strip() for part in cell.split(";") if part.strip()]
        elif column.startswith("provenance."):
            body.setdefault("provenance", {})[column.removeprefix("provenance.")] = cell
        elif column == "verbatim":
            body[column] = _flag(cell)
        else:
            body[column] = cell
    return body


def _flag(cell: str) -> bool:
    lowered = cell.strip().lower()
    if lowered in {"true", "yes", "1"}:
        return True
    if lowered in {"false", "no", "0"}:
        return False
    raise InvalidRequest(f"verbatim must be true or false, not {cell[:20]!r}")


def _markdown_records(folder: Path) -> tuple[list[Record], str]:
    from memwarden.domain.services.knowledge import markdown_files, read_text  # noqa: PLC0415 - see main.py

    digest = hashlib.sha256()
    records: list[Record] = []
    for path in markdown_files(folder):
        relative = path.relative_to(folder).as_posix()
        try:
            text = read_text(path, relative, MAX_MARKDOWN_BYTES)
        except InvalidRequest as error:
            records.append(Record(relative, problem=error.detail))
            continue
        digest.update(
            relative.encode("utf-8", "surrogateescape") + b"\0" + text.encode("utf-8", "surrogatepass")
        )
        try:
            records.append(Record(relative, _markdown_body(text)))
        except InvalidRequest as error:
            records.append(Record(relative, problem=error.detail))
    return records, digest.hexdigest()


def _markdown_body(text: str) -> dict[str, Any]:
    """Front matter keys (write fields) and the body as ``content``."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    meta: dict[str, Any] = {}
    if lines and lines[0].rstrip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
        if end is None:
            raise InvalidRequest("the front matter opened on line 1 is never closed by '---'")
        meta = _front_matter("\n".join(lines[1:end]))
        lines = lines[end + 1 :]
    if "content" in meta:
        raise InvalidRequest("the content is the file's body, not a front matter key")
    return {**meta, "content": "\n".join(lines).strip()}


def _front_matter(source: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 - see api/cli/main.py on imports

    try:
        loaded = yaml.safe_load(source)
    except yaml.YAMLError as error:
        raise InvalidRequest(f"invalid YAML front matter: {str(error).splitlines()[0]}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InvalidRequest("the front matter must be a mapping of write fields to values")
    return {str(key): _plain_time(value) for key, value in loaded.items()}


def _plain_time(value: Any) -> Any:
    """YAML reads ``2026-03-01`` as a date: as a time, a bare date is midnight UTC."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime.combine(value, clock_time(), tzinfo=UTC)
    return value


def entry_of(record: Record) -> BatchItem | Rejection:
    """The record as ``write_batch`` takes it; anything wrong rejects this record alone."""
    from memwarden.api.http.schemas import batch_entry  # noqa: PLC0415 - see api/cli/main.py on imports

    if record.body is None:
        return Rejection("invalid_request", f"{record.where}: {record.problem}")
    try:
        return batch_entry(record.where, record.body)
    except InvalidRequest as error:
        return Rejection(error.code, error.detail)


# -- resuming ---------------------------------------------------------------------------------------


class ProgressFile:
    """How many records of one source (for one writer) are done, in the data directory."""

    def __init__(self, data_dir: Path, source: Path, identity: Identity, fingerprint: str) -> None:
        key = "\0".join((str(source.resolve()), identity.namespace, identity.actor))
        name = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.path = data_dir / "imports" / f"{name}.json"
        self.fingerprint = fingerprint

    def done(self) -> int:
        """Records already done; 0 when the source changed since (dedupe then keeps it safe)."""
        try:
            saved = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return 0
        if not isinstance(saved, dict) or saved.get("fingerprint") != self.fingerprint:
            return 0
        done = saved.get("done")
        return done if isinstance(done, int) and done >= 0 else 0

    def save(self, done: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps({"fingerprint": self.fingerprint, "done": done}), "utf-8")
        partial.replace(self.path)  # atomic: a crash leaves the old count or the new one


# -- progress -----------------------------------------------------------------------------------------


# -- the import ----------------------------------------------------------------------------------------


def run_import(
    memory: MemoryService,
    identity: Identity,
    records: Sequence[Record],
    progress: ProgressFile,
    stream: TextIO,
    batch_size: int = MAX_BATCH_ITEMS,
) -> tuple[Counter[str], list[ImportRejection], int]:
    """Import what is not done yet, a batch at a time, saving progress after each batch:
    (outcome counts, rejections in order, records skipped as done before)."""
    from memwarden.api.cli.progress import ProgressBar  # noqa: PLC0415 - rich, only when an import runs

    skipped = min(progress.done(), len(records))
    outcomes: Counter[str] = Counter()
    rejections: list[ImportRejection] = []
    bar = ProgressBar("import", len(records), stream, start=skipped)
    for start in range(skipped, len(records), batch_size):
        chunk = records[start : start + batch_size]
        batch = memory.write_batch(identity, [entry_of(record) for record in chunk])
        for record, result in zip(chunk, batch.results, strict=True):
            outcomes[result.outcome] += 1
            rejections.extend(_rejections(record, result))
        progress.save(start + len(chunk))
        bar.advance(len(chunk))
    bar.finish()
    return outcomes, rejections, skipped


def _rejections(record: Record, result: WriteResult) -> list[ImportRejection]:
    if result.outcome != "rejected":
        return []
    prefix = record.where + ": "
    return [ImportRejection(record.where, r.reason, r.detail.removeprefix(prefix)) for r in result.rejected]


def importer_identity(namespace: str | None, acting_as: str | None) -> Identity:
    """``--as NAMESPACE/ACTOR`` (an owner of that namespace, as ``knowledge load --as``), or
    the CLI operator as owner of ``--namespace``."""
    if acting_as is not None:
        identity, _ = publisher(None, acting_as)
        return identity
    if namespace is None:
        raise InvalidRequest("give --as NAMESPACE/ACTOR (who writes, and where) or --namespace NS")
    return Identity(validate_namespace(namespace), OPERATOR, "owner")


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        identity = importer_identity(args.namespace, args.acting_as)
        records, fingerprint = read_source(path)
    except DomainError as error:
        sys.stderr.write(f"refused ({error.code}): {error.detail}\n")
        return 2
    except OSError as error:
        sys.stderr.write(f"cannot read {path}: {error.strerror or error}\n")
        return 2
    began = time.monotonic()
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        progress = ProgressFile(runtime.settings.data_dir, path, identity, fingerprint)
        if args.from_start:
            progress.save(0)
        try:
            outcomes, rejections, skipped = run_import(
                runtime.core.memory, identity, records, progress, sys.stderr, args.batch
            )
        except DomainError as error:
            sys.stderr.write(f"\nimport stopped ({error.code}): {error.detail}; re-run to resume\n")
            return 2
    summary = ImportSummary(
        path=str(path),
        namespace=identity.namespace,
        actor=identity.actor,
        records=len(records),
        skipped=skipped,
        outcomes=dict(outcomes),
        rejections=rejections[:SHOWN_REJECTIONS],
        seconds=round(time.monotonic() - began, 3),
    )
    if args.json:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    else:
        sys.stdout.write(summary_text(summary) + "\n")
    return 1 if outcomes["rejected"] else 0


OUTCOME_ORDER = ("stored", "deduplicated", "superseded", "disputed", "rejected")


def summary_text(summary: ImportSummary) -> str:
    counts = ", ".join(f"{summary.outcomes.get(o, 0)} {o}" for o in OUTCOME_ORDER)
    lines = [
        f"imported {summary.path} into {summary.namespace} as {summary.actor}: "
        f"{summary.records} records in {summary.seconds:.1f}s",
        f"  {counts}" + (f"; {summary.skipped} skipped (done by an earlier run)" if summary.skipped else ""),
    ]
    if summary.rejections:
        lines.append("  first rejections:")
        lines.extend(f"    {r.where}: {r.reason}: {r.detail}" for r in summary.rejections)
    return "\n".join(lines)


def register(sub: Any) -> None:
    """``memwarden import PATH``; called by api/cli/main.py."""
    parser = sub.add_parser("import", help="memories from JSONL, CSV or a Markdown folder, resumable")
    parser.add_argument("path", help="a .jsonl/.ndjson or .csv file, or a folder of .md files")
    parser.add_argument("--as", dest="acting_as", metavar="NAMESPACE/ACTOR", help="who writes, and where")
    parser.add_argument("--namespace", help="where, written by the CLI operator (without --as)")
    parser.add_argument(
        "--batch", type=_batch_size, default=MAX_BATCH_ITEMS, help=f"records per batch (1-{MAX_BATCH_ITEMS})"
    )
    parser.add_argument("--from-start", action="store_true", help="ignore the progress of an earlier run")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=cmd_import)


def _batch_size(text: str) -> int:
    value = int(text)
    if not 0 < value <= MAX_BATCH_ITEMS:
        raise argparse.ArgumentTypeError(f"between 1 and {MAX_BATCH_ITEMS}")
    return value
