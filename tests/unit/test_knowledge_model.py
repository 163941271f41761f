"""L3 knowledge documents: parsing, chunking, hashing and the publish decider. No I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import pytest

from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, OutsideSubtree
from memwarden.domain.model.events import AuditRecorded, KnowledgePublished
from memwarden.domain.model.identity import Identity, Role
from memwarden.domain.model.knowledge import (
    HEADING_SEPARATOR,
    MAX_CHUNK_CHARS,
    KnowledgeDraft,
    KnowledgeRejected,
    KnowledgeState,
    chunk_id,
    chunk_markdown,
    content_hash,
    decide_publish,
    embedding_input,
    evolve_knowledge,
    knowledge_stream,
    parse_document,
    resolve_namespace,
    slug_from_filename,
)
from tests.unit.builders import T0, at, ident

NS = "acme/eng"
OWNER = ident("owner", "olga", namespace="acme")
ADMIN = ident("admin", "adam", namespace=NS)
POLICY = WritePolicy()

DEPLOYS = """---
title: Deploys
slug: deploys
tags: [ops, deploy]
---
# Deploys

Every deploy goes through the pipeline; nobody ships from a laptop.

## Rollback

Run the rollback job with the previous release tag. It takes about four minutes.

## Canary

Ten percent of traffic for thirty minutes before the full rollout.
"""


def draft(text: str = DEPLOYS, filename: str = "runbooks/deploys.md") -> KnowledgeDraft:
    return parse_document(text, filename)


# -- parsing ---------------------------------------------------------------------------------


def test_front_matter_fields_are_read() -> None:
    parsed = draft()
    assert parsed.title == "Deploys"
    assert parsed.slug == "deploys"
    assert parsed.tags == ("ops", "deploy")
    assert parsed.namespace is None
    assert parsed.source == "runbooks/deploys.md"
    assert parsed.body.startswith("# Deploys\n")
    assert "---" not in parsed.body


def test_unknown_front_matter_key_is_refused_by_name() -> None:
    with pytest.raises(InvalidRequest, match=r"deploys\.md: unknown front matter key 'titel'"):
        parse_document("---\ntitel: Deploys\n---\nThe deploy pipeline runs hourly.\n", "deploys.md")


def test_bad_yaml_names_the_file_and_the_line() -> None:
    text = "---\ntitle: Deploys\ntags: [ops\nslug: x\n---\nThe deploy pipeline runs hourly.\n"
    with pytest.raises(InvalidRequest) as caught:
        parse_document(text, "deploys.md")
    message = caught.value.detail
    assert message.startswith("deploys.md: invalid YAML front matter at line ")
    line = int(re.search(r"line (\d+)", message).group(1))  # type: ignore[union-attr]
    assert 3 <= line <= 5  # the unclosed list on line 3, noticed by line 5 at the latest


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("- a list\n", "must be a mapping"),
        ("title: [not, a, string]\n", "title must be a string"),
        ("tags: ops\n", "tags must be a list of strings"),
        ("tags: [1, 2]\n", "tags must be a list of strings"),
        ("slug: Not A Slug\n", "slug must be"),
        ("slug: 42\n", "slug must be"),
        ("namespace: ''\n", "namespace must be a non-empty string"),
    ],
)
def test_bad_front_matter_values_are_refused(front: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_document(f"---\n{front}---\nThe deploy pipeline runs hourly.\n", "deploys.md")


def test_unclosed_front_matter_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="never closed"):
        parse_document("---\ntitle: Deploys\nThe deploy pipeline runs hourly.\n", "deploys.md")


@pytest.mark.parametrize("body", ["", "   \n\n  ", "# Only a heading\n\n## And another\n"])
def test_a_document_without_text_is_refused(body: str) -> None:
    with pytest.raises(InvalidRequest, match=r"deploys\.md: the document has no"):
        parse_document(f"---\ntitle: Deploys\n---\n{body}", "deploys.md")


def test_without_front_matter_title_comes_from_the_first_heading_and_slug_from_the_file() -> None:
    parsed = parse_document(
        "Intro line.\n\n# On-call Handbook\n\nPage the secondary after 15 minutes.\n",
        "team/On Call_Handbook (v2).md",
    )
    assert parsed.title == "On-call Handbook"
    assert parsed.slug == "on-call-handbook-v2"
    assert parsed.tags == ()


def test_without_any_heading_the_title_is_the_file_stem() -> None:
    parsed = parse_document("Page the secondary after fifteen minutes.\n", "oncall-notes.md")
    assert parsed.title == "oncall-notes"
    assert parsed.slug == "oncall-notes"


def test_a_file_name_with_no_usable_character_needs_a_slug() -> None:
    with pytest.raises(InvalidRequest, match="set 'slug'"):
        parse_document("Page the secondary after fifteen minutes.\n", "___.md")
    assert slug_from_filename("Ünïcode Notes.md") == "unicode-notes"
    assert slug_from_filename("дежурство.md") == ""


def test_line_endings_and_bom_do_not_change_the_document() -> None:
    windows = "\ufeff" + DEPLOYS.replace("\n", "\r\n")
    assert parse_document(windows, "deploys.md").body == parse_document(DEPLOYS, "deploys.md").body


def test_empty_front_matter_is_allowed() -> None:
    parsed = parse_document("---\n---\nThe deploy pipeline runs hourly.\n", "pipeline.md")
    assert parsed.slug == "pipeline"


def test_tags_are_deduplicated_in_order() -> None:
    parsed = parse_document("---\ntags: [b, a, b]\n---\nThe deploy pipeline runs hourly.\n", "p.md")
    assert parsed.tags == ("b", "a")


# -- namespaces --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (None, "acme/eng"),
        ("acme/eng", "acme/eng"),
        ("acme/eng/runbooks", "acme/eng/runbooks"),
        ("runbooks", "acme/eng/runbooks"),
        ("runbooks/deploys", "acme/eng/runbooks/deploys"),
    ],
)
def test_declared_namespaces_resolve_below_the_loader(declared: str | None, expected: str) -> None:
    assert resolve_namespace("acme/eng", declared) == expected


@pytest.mark.parametrize("declared", ["acme", "acme/sales", "acme/engineering"])
def test_a_namespace_of_the_same_tenant_outside_the_loader_is_refused(declared: str) -> None:
    with pytest.raises(OutsideSubtree):
        resolve_namespace("acme/eng", declared)


@pytest.mark.parametrize("declared", ["/abs", "../sales", "runbooks/../..", "a//b", "a b"])
def test_namespace_tricks_are_refused(declared: str) -> None:
    with pytest.raises(InvalidRequest):
        resolve_namespace("acme/eng", declared)


# -- chunking ----------------------------------------------------------------------------------


def test_sections_follow_headings_with_their_path() -> None:
    chunks = chunk_markdown(draft().body)
    sep = HEADING_SEPARATOR
    assert [h for h, _ in chunks] == ["Deploys", f"Deploys{sep}Rollback", f"Deploys{sep}Canary"]
    assert chunks[1][1].startswith("Run the rollback job")
    assert all(not text.startswith("#") for _, text in chunks)


def test_text_before_the_first_heading_is_a_chunk_and_empty_sections_are_dropped() -> None:
    body = "Preamble text here.\n\n# A\n\n## B\n\nText of B.\n\n### C\n"
    assert chunk_markdown(body) == [("", "Preamble text here."), (f"A{HEADING_SEPARATOR}B", "Text of B.")]


def test_deeper_heading_levels_nest_and_shallower_ones_pop() -> None:
    body = "# A\n\na\n\n### C\n\nc\n\n## B\n\nb\n\n###### F\n\nf\n\n# Z\n\nz\n"
    sep = HEADING_SEPARATOR
    assert [h for h, _ in chunk_markdown(body)] == ["A", f"A{sep}C", f"A{sep}B", f"A{sep}B{sep}F", "Z"]


def test_a_hash_inside_a_code_block_is_not_a_heading() -> None:
    body = "# Setup\n\nInstall it:\n\n```bash\n# install the tool\n\nmake install\n```\n\nDone.\n"
    chunks = chunk_markdown(body)
    assert len(chunks) == 1
    heading, text = chunks[0]
    assert heading == "Setup"
    assert "# install the tool\n\nmake install" in text


def test_long_sections_split_at_paragraphs_never_mid_word() -> None:
    paragraphs = [" ".join(f"w{p}x{i}" for i in range(60)) for p in range(12)]
    body = "# Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_markdown(body)
    assert len(chunks) > 1
    assert all(h == "Long" for h, _ in chunks)
    assert all(len(t) <= MAX_CHUNK_CHARS for _, t in chunks)
    words = [w for _, t in chunks for w in t.split()]
    assert words == " ".join(paragraphs).split()  # nothing lost, nothing cut, same order
    assert all(any(p in t for _, t in chunks) for p in paragraphs)  # paragraphs are never split


def test_a_single_huge_paragraph_splits_at_words() -> None:
    body = "# Wall\n\n" + " ".join(f"word{i}" for i in range(1_000))
    chunks = chunk_markdown(body)
    assert len(chunks) > 1
    assert all(len(t) <= MAX_CHUNK_CHARS for _, t in chunks)
    assert [w for _, t in chunks for w in t.split()] == [f"word{i}" for i in range(1_000)]


def test_a_word_longer_than_the_limit_is_kept_whole() -> None:
    blob = "x" * (MAX_CHUNK_CHARS + 50)
    chunks = chunk_markdown(f"# Key\n\nbefore {blob} after")
    assert blob in [t for _, t in chunks]


def test_chunking_is_deterministic() -> None:
    body = draft().body + "\n\n" + "\n\n".join("para " * 80 for _ in range(10))
    assert chunk_markdown(body) == chunk_markdown(body)
    assert decide(draft()) == decide(draft())


def test_embedding_input_places_the_chunk_in_the_document() -> None:
    sep = HEADING_SEPARATOR
    assert (
        embedding_input("Deploys", f"Deploys{sep}Rollback", "Run it.") == f"Deploys{sep}Rollback\n\nRun it."
    )
    assert embedding_input("Runbook", "Rollback", "Run it.") == f"Runbook{sep}Rollback\n\nRun it."
    assert embedding_input("Runbook", "", "Run it.") == "Runbook\n\nRun it."


# -- hashing and ids ---------------------------------------------------------------------------


def test_content_hash_covers_title_tags_and_body_only() -> None:
    base = draft()
    assert content_hash(base) == content_hash(draft(filename="elsewhere/deploys.md"))
    for changed in (
        DEPLOYS.replace("title: Deploys", "title: Deployments"),
        DEPLOYS.replace("[ops, deploy]", "[ops]"),
        DEPLOYS.replace("four minutes", "five minutes"),
    ):
        assert content_hash(draft(changed)) != content_hash(base)
    assert re.fullmatch(r"[0-9a-f]{64}", content_hash(base))


def test_document_and_chunk_ids_are_stable() -> None:
    assert knowledge_stream(NS, "deploys") == knowledge_stream(NS, "deploys")
    assert knowledge_stream(NS, "deploys") != knowledge_stream("acme/ops", "deploys")
    assert knowledge_stream("a/b", "c") != knowledge_stream("a", "b/c")
    doc = knowledge_stream(NS, "deploys")
    assert chunk_id(doc, 1, 0) == chunk_id(doc, 1, 0)
    assert len({chunk_id(doc, v, o) for v in (1, 2) for o in (0, 1)}) == 4


# -- deciding ----------------------------------------------------------------------------------


def decide(
    d: KnowledgeDraft,
    *,
    identity: Identity = ADMIN,
    target: str = NS,
    current: KnowledgeState | None = None,
    policy: WritePolicy = POLICY,
    embeddings: Sequence[bytes | None] = (),
) -> KnowledgePublished | None:
    model = "model-x" if embeddings else None
    return decide_publish(identity, d, target, current, policy, T0, embeddings, model)


def test_first_publication_is_version_one() -> None:
    event = decide(draft())
    assert event is not None
    assert event.version == 1
    assert event.document_id == knowledge_stream(NS, "deploys")
    assert event.namespace == NS
    assert event.published_by == "adam"
    assert event.source == "runbooks/deploys.md"
    assert event.content_hash == content_hash(draft())
    assert [c.chunk_id for c in event.chunks] == [chunk_id(event.document_id, 1, i) for i in range(3)]
    assert all(c.embedding is None for c in event.chunks)
    assert event.embedding_model is None
    assert event.at == T0


def test_unchanged_content_publishes_nothing() -> None:
    first = decide(draft())
    assert first is not None
    state = evolve_knowledge(None, first)
    assert decide(draft(filename="moved/deploys.md"), current=state) is None


def test_changed_content_publishes_the_next_version() -> None:
    first = decide(draft())
    assert first is not None
    v1 = evolve_knowledge(None, first)
    second = decide(draft(DEPLOYS.replace("four", "five")), current=v1)
    assert second is not None
    assert second.version == 2
    assert second.document_id == first.document_id
    assert {c.chunk_id for c in second.chunks}.isdisjoint({c.chunk_id for c in first.chunks})
    v2 = evolve_knowledge(v1, second)
    third = decide(draft(DEPLOYS.replace("four", "six")), current=v2)
    assert third is not None
    assert third.version == 3


def test_a_shredded_document_gets_no_new_version() -> None:
    """Its data key is gone (the sealed fields decode empty): a new key for the same
    document could not open the older versions, so the slug is not published again."""
    first = decide(draft())
    assert first is not None
    shredded = msgspec.structs.replace(first, title="", body="", chunks=(), content_hash="")
    assert shredded.shredded
    assert not first.shredded
    state = evolve_knowledge(None, shredded)
    assert state.shredded
    for text in (DEPLOYS, DEPLOYS.replace("four", "five")):
        with pytest.raises(InvalidState, match="erased"):
            decide(draft(text), current=state)


def test_embeddings_go_with_their_chunks() -> None:
    vectors = [b"\x01\x02", None, b"\x03\x04"]
    event = decide(draft(), embeddings=vectors)
    assert event is not None
    assert [c.embedding for c in event.chunks] == vectors
    assert event.embedding_model == "model-x"
    with pytest.raises(InvalidRequest, match="2 embeddings for 3 chunks"):
        decide(draft(), embeddings=[b"\x01\x02", None])


@pytest.mark.parametrize("role", ["agent", "member", "auditor"])
def test_only_admins_and_owners_publish(role: Role) -> None:
    with pytest.raises(Forbidden, match="may not publish knowledge"):
        decide(draft(), identity=ident(role, "someone", namespace=NS))


def test_an_owner_of_the_tenant_publishes_anywhere_below() -> None:
    assert decide(draft(), identity=OWNER, target="acme/eng/runbooks") is not None


@pytest.mark.parametrize("target", ["acme", "acme/ops", "acme/engineering", "globex/eng"])
def test_publishing_outside_the_callers_subtree_is_refused(target: str) -> None:
    with pytest.raises(OutsideSubtree):
        decide(draft(), target=target)


def test_a_secret_is_refused_when_the_policy_forbids_it() -> None:
    leaky = draft(DEPLOYS.replace("four minutes.", "four minutes. Key AKIAABCDEFGHIJKLMNOP."))
    with pytest.raises(KnowledgeRejected, match="secret_forbidden") as caught:
        decide(leaky)
    assert [r.reason for r in caught.value.rejections] == ["secret_forbidden"]
    assert decide(leaky, policy=WritePolicy(forbid_secrets=False)) is not None


def test_a_secret_in_the_title_is_refused_too() -> None:
    leaky = draft(DEPLOYS.replace("title: Deploys", "title: Deploys ghp_" + "a" * 36))
    with pytest.raises(KnowledgeRejected, match="secret_forbidden"):
        decide(leaky)


def test_a_document_over_the_size_limit_is_refused() -> None:
    with pytest.raises(KnowledgeRejected, match="too_large"):
        decide(draft(), policy=WritePolicy(max_content_bytes=100))


def test_the_current_state_must_be_of_the_same_document() -> None:
    other = decide(draft(), target="acme/eng/other")
    assert other is not None
    with pytest.raises(InvalidState):
        decide(draft(DEPLOYS.replace("four", "five")), current=evolve_knowledge(None, other))


def test_evolve_refuses_gaps_and_foreign_events() -> None:
    first = decide(draft())
    assert first is not None
    with pytest.raises(InvalidState, match="version 1 after 1"):
        evolve_knowledge(evolve_knowledge(None, first), first)
    audit = AuditRecorded(
        record_id=knowledge_stream("x", "y"),
        actor="a",
        namespace=NS,
        role="admin",
        op="x",
        outcome="ok",
        at=at(),
    )
    with pytest.raises(InvalidState, match="does not belong"):
        evolve_knowledge(None, audit)
