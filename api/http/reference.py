"""docs/reference.md, generated from the app's OpenAPI document: every route with its
roles, body, answer and errors. ``python -m memwarden.api.http.reference`` rewrites the file;
``python -m memwarden.api.http.reference --check`` exits 1 when it is out of date (the tests check it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memwarden.api.http.app import create_app

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
HEADER = """# memwarden — API reference

Generated from the OpenAPI document (`/schema/openapi.json`) by `python -m memwarden.api.http.reference`;
do not edit by hand. The contract and its rules are in the repository's README and
DESIGN notes; every request but the public ones carries `Authorization: Bearer mw_…`, and
every error is `{"error": "<code>", "detail": "<human sentence>"}`.

MCP: the syscalls below are also MCP tools (one per `/v1/mem/<name>` route, same body as
arguments, same answer as the tool result), over streamable HTTP at `POST /mcp` with the
same `Authorization` header, and over stdio with `memwarden mcp`.
"""


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return str(ref).rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _type_of(schema: dict[str, Any]) -> str:
    """A short human rendering of a JSON schema's type."""
    name = _ref_name(schema)
    if name is not None:
        return name
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            return " \\| ".join(_type_of(s) for s in schema[combinator])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(schema.get('items', {}))}"
    if isinstance(kind, list):
        return " \\| ".join(str(k) for k in kind)
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    name = _ref_name(schema)
    return dict(components.get(name, {})) if name is not None else schema


def _fields(schema: dict[str, Any], components: dict[str, Any]) -> list[str]:
    resolved = _resolve(schema, components)
    properties: dict[str, Any] = resolved.get("properties", {})
    if not properties:
        return []
    required = set(resolved.get("required", []))
    lines = ["| field | type | required | notes |", "| --- | --- | --- | --- |"]
    for name, prop in properties.items():
        notes = " ".join(str(prop.get("description", "")).split())
        if "default" in prop and prop["default"] not in (None, [], {}):
            notes = (notes + f" (default `{json.dumps(prop['default'])}`)").strip()
        lines.append(f"| `{name}` | {_type_of(prop)} | {'yes' if name in required else ''} | {notes} |")
    return lines


def _operation(method: str, path: str, op: dict[str, Any], components: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}` — {op.get('summary', '')}", ""]
    out += [str(op.get("description", "")).strip(), ""]
    if "operationId" in op:
        out += [
            f"Operation `{op['operationId']}` (the Python client's method: `client.{op['operationId']}(…)`).",
            "",
        ]
    parameters = [p for p in op.get("parameters", []) if p.get("in") in {"path", "query"}]
    if parameters:
        out += [
            "Parameters:",
            "",
            "| name | in | type | required | notes |",
            "| --- | --- | --- | --- | --- |",
        ]
        out += [
            f"| `{p['name']}` | {p['in']} | {_type_of(p.get('schema', {}))} | {'yes' if p.get('required') else ''}"
            f" | {_parameter_notes(p)} |"
            for p in parameters
        ]
        out.append("")
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body:
        out += [f"Body: {_type_of(body)}", ""]
        out += [*_fields(body, components), ""]
    for status, response in sorted(op.get("responses", {}).items()):
        schema = (response.get("content") or {}).get("application/json", {}).get("schema")
        if status.startswith("2"):
            out += [f"Answer {status}: {_type_of(schema) if schema else response.get('description', '')}", ""]
            if schema:
                fields = _fields(schema, components)
                out += [*fields, ""] if fields else []
    errors = [(s, r) for s, r in sorted(op.get("responses", {}).items()) if s[0] in "45"]
    if errors:
        out += ["Errors:", ""]
        out += [f"- **{status}** {response.get('description', '')}" for status, response in errors]
        out.append("")
    return out


def _parameter_notes(parameter: dict[str, Any]) -> str:
    """The parameter's description and bounds, as one table cell."""
    schema = parameter.get("schema", {})
    notes = [str(parameter.get("description") or schema.get("description") or "")]
    bounds = [f"{name} {_number(schema[key])}" for key, name in _BOUNDS if key in schema]
    if "default" in schema:
        bounds.append(f"default `{schema['default']}`")
    notes += [", ".join(bounds)] if bounds else []
    return "; ".join(n for n in notes if n).replace("|", "\\|")


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


_BOUNDS = (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"))


def render() -> str:
    document = create_app().openapi_schema.to_schema()
    components: dict[str, Any] = document.get("components", {}).get("schemas", {})
    sections: dict[str, list[str]] = {}
    for path, item in document.get("paths", {}).items():
        group = path.split("/")[2] if path.startswith("/v1/") else "health"
        for method, op in item.items():
            if method in {"head", "options"}:
                continue
            sections.setdefault(group, []).extend(_operation(method, path, op, components))
    titles = {
        "mem": "Syscalls",
        "admin": "Admin",
        "compliance": "Compliance",
        "ops": "Ops",
        "health": "Health",
    }
    out = [HEADER]
    for group in ("mem", "admin", "compliance", "ops", "health"):
        if group in sections:
            out += [f"## {titles[group]}", "", *sections[group]]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/reference.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
        if current != text:
            sys.stderr.write(f"{REFERENCE} is out of date: run python -m memwarden.api.http.reference\n")
            return 1
        return 0
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
