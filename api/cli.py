"""The `memwarden` command line: the same operations, talking to the database directly."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from api.runtime import Runtime
from domain.ledger.checkpoints import Checkpoint, InvalidCheckpoint

Handler = Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(msgspec.json.encode(data).decode() + "\n")
    else:
        sys.stdout.write(text + "\n")


def cmd_demo(_args: argparse.Namespace) -> int:
    from api.demo import run_demo  # noqa: PLC0415 - only this command needs it

    with Runtime() as runtime:
        facts = run_demo(runtime)
    ok = facts["report"].ok and not facts["tampered"].ok
    sys.stdout.write("\ndemo complete.\n" if ok else "\ndemo FAILED.\n")
    return 0 if ok else 1


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    checkpoint = None
    if args.checkpoint:
        try:
            checkpoint = msgspec.json.decode(Path(args.checkpoint).read_bytes(), type=Checkpoint)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
            sys.stderr.write(f"cannot read checkpoint {args.checkpoint}: {error}\n")
            return 2
    with Runtime(follow=False) as runtime:
        try:
            report = runtime.ledger.verify(checkpoint)
        except InvalidCheckpoint as error:
            sys.stderr.write(f"checkpoint refused: {error}\n")
            return 1
    if report.ok:
        text = f"ok: {report.checked} events; head {report.head_position} {report.head_hash}"
    else:
        text = f"FAILED: first bad position {report.first_bad_position} ({report.problem})"
    _emit(args, report, text)
    return 0 if report.ok else 1


def cmd_ledger_checkpoint(_args: argparse.Namespace) -> int:
    with Runtime(follow=False) as runtime:
        checkpoint = runtime.ledger.checkpoint()
    sys.stdout.write(msgspec.json.encode(checkpoint).decode() + "\n")
    return 0


def cmd_projections_status(args: argparse.Namespace) -> int:
    with Runtime(follow=False) as runtime:
        statuses = runtime.reads.runner.status()
    lines = [
        f"{s.name:20} position {s.position:>10} lag {s.lag:>8}"
        + (f"  STOPPED at {s.stopped_at}: {s.error}" if s.error else "")
        for s in statuses
    ]
    _emit(args, statuses, "\n".join(lines))
    return 0 if all(s.error is None for s in statuses) else 1


def cmd_bench_write(args: argparse.Namespace) -> int:
    from api.bench.write import run_write_bench  # noqa: PLC0415

    return run_write_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memwarden", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the guided tour on the embedded default")
    demo.set_defaults(handler=cmd_demo)

    ledger = sub.add_parser("ledger", help="verify or checkpoint the hash chain").add_subparsers(
        dest="ledger_command", required=True
    )
    verify = ledger.add_parser("verify", help="recompute the chain; exit 0 when it holds")
    verify.add_argument("--checkpoint", help="a checkpoint JSON file to verify against")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_ledger_verify)
    checkpoint = ledger.add_parser("checkpoint", help="print a signed checkpoint of the head")
    checkpoint.add_argument("--json", action="store_true")
    checkpoint.set_defaults(handler=cmd_ledger_checkpoint)

    projections = sub.add_parser("projections", help="read models").add_subparsers(
        dest="projections_command", required=True
    )
    status = projections.add_parser("status", help="each projection's position and lag")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_projections_status)

    bench = sub.add_parser("bench", help="benchmarks, each with its reference").add_subparsers(
        dest="bench_command", required=True
    )
    write = bench.add_parser("write", help="sustained writes through domain+ledger vs plain INSERT")
    write.add_argument("--seconds", type=float, default=5.0, help="measuring time per run")
    write.add_argument("--writers", default="1,4,16", help="comma-separated writer counts")
    write.add_argument("--json", action="store_true")
    write.set_defaults(handler=cmd_bench_write)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
