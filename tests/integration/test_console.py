"""The console through Litestar's TestClient: login and its cookie, CSRF, roles, each page
on real data, and actions that take effect through the API's gate and are audited."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.e2e.review_seed import seed_review_queues

BASE = "https://testserver"  # the session cookie is Secure


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime), base_url=BASE) as client:
        yield Api(runtime, client)


def login(api: Api, key: str) -> str:
    """Signs in and returns the CSRF token of the session's pages."""
    answer = api.client.post("/console/login", data={"key": key}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    page = api.client.get("/console/audit")
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert found is not None
    return found.group(1)


def ops_of(api: Api, key_actor: str) -> list[tuple[str, str]]:
    return [(r.op, r.outcome) for r in api.audit_records() if r.actor == key_actor]


def test_login_sets_a_secure_http_only_strict_cookie_and_logout_clears_it(api: Api) -> None:
    auditor = api.key("acme", "ann", "auditor")
    answer = api.client.post("/console/login", data={"key": auditor}, follow_redirects=False)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"].lower()
    for flag in ("secure", "httponly", "samesite=strict", "path=/console"):
        assert flag in cookie
    page = api.client.get("/console/audit")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "style-src 'self'" in csp
    assert "http" not in page.text.split("<main>")[0].replace("https://testserver", "")
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert csrf is not None
    out = api.client.post("/console/logout", data={"csrf": csrf.group(1)}, follow_redirects=False)
    assert out.status_code == 303
    assert "max-age=0" in out.headers["set-cookie"].lower()
    assert api.client.get("/console/audit", follow_redirects=False).headers["location"] == "/console/login"


def test_agent_member_and_bad_keys_are_refused_at_login(api: Api) -> None:
    for role in ("agent", "member"):
        key = api.key("acme/eng", f"x-{role}", role)
        answer = api.client.post("/console/login", data={"key": key}, follow_redirects=False)
        assert answer.status_code == 403
        assert "set-cookie" not in answer.headers
        assert f"role {role} may not use the console" in answer.text
    for bad in ("", "mw_nonsense", "mw_" + "a" * 40, "\x00"):
        answer = api.client.post("/console/login", data={"key": bad}, follow_redirects=False)
        assert answer.status_code == 401
        assert "set-cookie" not in answer.headers
    assert api.client.get("/console/keys", follow_redirects=False).status_code == 303


def test_a_post_without_the_sessions_csrf_token_is_refused_and_changes_nothing(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    body = {"target": "acme/eng", "actor": "evil", "role": "agent"}
    for token in (None, "", "0" * 64):
        data = dict(body) if token is None else {**body, "csrf": token}
        answer = api.client.post("/console/keys", data=data)
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert all(k["actor"] != "evil" for k in api.call(admin, "/v1/admin/keys", method="GET").json()["items"])
    made = api.client.post("/console/keys", data={**body, "csrf": csrf})
    assert made.status_code == 200
    assert any(k["actor"] == "evil" for k in api.call(admin, "/v1/admin/keys", method="GET").json()["items"])


def test_keys_page_creates_a_key_shown_once_and_revokes_through_the_audited_gate(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    made = api.client.post(
        "/console/keys", data={"target": "acme/eng", "actor": "newbot", "role": "agent", "csrf": csrf}
    )
    shown = re.search(r'id="new-key">(mw_[^<]+)<', made.text)
    assert shown is not None
    new_key = shown.group(1)
    assert api.mem(new_key, "stats").status_code == 200  # a real key
    listing = api.client.get("/console/keys")
    assert "newbot" in listing.text
    assert new_key not in listing.text  # shown once
    key_id = next(
        k["key_id"]
        for k in api.call(admin, "/v1/admin/keys", method="GET").json()["items"]
        if k["actor"] == "newbot"
    )
    revoked = api.client.post(
        "/console/keys/revoke", data={"key_id": key_id, "csrf": csrf}, follow_redirects=False
    )
    assert revoked.status_code == 303
    assert api.mem(new_key, "stats").status_code == 401
    ops = ops_of(api, "boss")
    assert ("admin.keys.create", "ok") in ops
    assert ("admin.keys.revoke", "ok") in ops
    # a role above the caller's is refused by the API's own rule, shown as a page
    above = api.client.post(
        "/console/keys", data={"target": "acme", "actor": "x", "role": "owner", "csrf": csrf}
    )
    assert above.status_code == 403
    assert "Refused" in above.text


def test_auditor_is_refused_admin_and_owner_pages_by_the_api_gate(api: Api) -> None:
    auditor = api.key("acme", "ann", "auditor")
    login(api, auditor)
    for path in ("/console/keys", "/console/review/disputes", "/console/projections"):
        answer = api.client.get(path)
        assert answer.status_code == 403, path
        assert "forbidden" in answer.text
    ops = ops_of(api, "ann")
    assert ("admin.keys.list", "denied") in ops
    assert ("ops.projections", "denied") in ops


def test_audit_browser_filters_pages_and_escapes_caller_text(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    member = api.key("acme/eng", "mia", "member")
    api.mem(member, "write", {"content": "<script>alert(1)</script> lives"})
    api.mem(member, "stats")
    login(api, owner)
    page = api.client.get("/console/audit", params={"op": "write", "outcome": "ok"})
    assert page.status_code == 200
    assert "<td>write</td>" in page.text
    assert "<td>stats</td>" not in page.text
    assert "<script>" not in page.text
    first = api.client.get("/console/audit", params={"limit": "1"})  # not a console filter: ignored
    assert first.status_code == 200
    paged = api.client.get("/console/audit", params={"actor": "mia"})
    assert "mia" in paged.text
    for bad in ({"since": "yesterday-ish"}, {"since": "9999-99-99"}, {"actor": "a\x00b"}, {"cursor": "x"}):
        refused = api.client.get("/console/audit", params=bad)
        assert refused.status_code == 400, bad
        assert "Refused" in refused.text


def test_audit_browser_follows_the_cursor(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    member = api.key("acme/eng", "mia", "member")
    for _ in range(3):
        api.mem(member, "stats")
    login(api, owner)
    records = api.call(
        owner, "/v1/compliance/audit", method="GET", params={"op": "stats", "limit": "2"}
    ).json()
    cursor = records["cursor"]
    assert cursor is not None
    page = api.client.get("/console/audit", params={"op": "stats", "order": "oldest", "cursor": cursor})
    assert page.status_code == 200
    positions = re.findall(r"<tr><td>(\d+)</td>", page.text)
    assert positions
    after, _, upto = cursor.partition(":")  # the walk's snapshot travels in the cursor
    assert all(int(after) < int(p) <= int(upto) for p in positions)


def test_audit_browser_shows_newest_first_and_walks_back(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    member = api.key("acme/eng", "mia", "member")
    for _ in range(5):
        api.mem(member, "stats")
    login(api, owner)
    first = api.client.get("/console/audit", params={"op": "stats", "limit": "2"})
    shown = [int(p) for p in re.findall(r"<tr><td>(\d+)</td>", first.text)]
    assert len(shown) == 5  # the console's page size is the API's default
    assert shown == sorted(shown, reverse=True)
    walked: list[int] = []
    cursor: str | None = None
    while True:
        params = {"op": "stats", "limit": "2", "order": "newest", **({"cursor": cursor} if cursor else {})}
        page = api.call(owner, "/v1/compliance/audit", method="GET", params=params).json()
        walked += [r["position"] for r in page["items"]]
        cursor = page["cursor"]
        if cursor is None:
            break
        api.mem(member, "stats")  # appended above the walk's snapshot: never in it
    assert walked == shown


def _nav(page: str) -> set[str]:
    header = page.split("<nav>")[1].split("</nav>", maxsplit=1)[0]
    return set(re.findall(r'<a href="(/console/[^"]+)"', header))


@pytest.mark.parametrize(
    ("role", "projections", "reviews"),
    [("owner", True, True), ("admin", False, True), ("auditor", False, False)],
)
def test_navigation_offers_a_role_only_the_pages_it_may_use(
    api: Api, role: str, projections: bool, reviews: bool
) -> None:
    login(api, api.key("acme", "rho", role))
    links = _nav(api.client.get("/console/audit").text)
    assert {"/console/audit", "/console/ledger", "/console/certificates"} <= links
    assert ("/console/projections" in links) is projections
    assert ("/console/keys" in links) is reviews
    assert ("/console/review/findings" in links) is reviews
    for link in links:  # every page offered opens
        assert api.client.get(link).status_code == 200, link


def test_as_of_explorer_shows_the_subtree_diffs_two_instants_and_follows_history(api: Api) -> None:
    member = api.key("acme/eng", "mia", "member")
    auditor = api.key("acme", "ann", "auditor")
    before = api.client.get("/healthz")
    assert before.status_code == 200
    written = api.mem(member, "write", {"content": "Oslo office opens in May"}).json()
    api.settle()
    login(api, auditor)
    page = api.client.get("/console/asof", params={"as_of": "2999-01-01", "compare_as_of": "2000-01-01"})
    assert page.status_code == 200, page.text
    assert "Oslo office opens in May" in page.text
    assert "removed" in page.text  # not yet believed in 2000
    empty = api.client.get("/console/asof", params={"as_of": "2000-01-01"})
    assert "Oslo office" not in empty.text
    history = api.client.get(f"/console/memory/{written['id']}")
    assert history.status_code == 200
    assert "Oslo office opens in May" in history.text
    assert "valid_from" in history.text
    assert "recorded_at" in history.text
    for bad in ({"as_of": "not a date"}, {"as_of": "2026-13-40"}, {"as_of": "2026-01-01", "query": "a\x00"}):
        refused = api.client.get("/console/asof", params=bad)
        assert refused.status_code == 400, bad
    assert ("compliance.asof", "ok") in ops_of(api, "ann")


def _dispute(api: Api) -> tuple[str, dict[str, Any]]:
    member = api.key("acme/eng", "mia", "member")
    agent = api.key("acme/eng", "bot", "agent")
    api.mem(
        member,
        "write",
        {
            "content": "Dana lives in Oslo",
            "subject": "dana",
            "attribute": "city",
            "value": "Oslo",
            "provenance": {"source": "manual"},
        },
    )
    contra = api.mem(
        agent,
        "write",
        {"content": "Dana lives in Bergen", "subject": "dana", "attribute": "city", "value": "Bergen"},
    ).json()
    assert contra["outcome"] == "disputed"
    return agent, contra


@pytest.mark.parametrize("decision", ["uphold_new", "keep_old", "both_valid", "edit"])
def test_review_queue_decides_a_dispute_in_one_click(api: Api, decision: str) -> None:
    _agent, contra = _dispute(api)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    queue = api.client.get("/console/review/disputes")
    assert queue.status_code == 200
    assert contra["dispute_id"] in queue.text
    form = {"decision": decision, "csrf": csrf}
    if decision == "edit":
        form["content"] = "Dana lives in Trondheim"
    done = api.client.post(
        f"/console/review/disputes/{contra['dispute_id']}", data=form, follow_redirects=False
    )
    assert done.status_code == 303, done.text
    resolved = api.call(admin, "/v1/admin/disputes?status=resolved", method="GET").json()["items"]
    assert [(d["id"], d["decision"]) for d in resolved] == [(contra["dispute_id"], decision)]
    assert ("resolve_dispute", "ok") in ops_of(api, "boss")
    assert contra["dispute_id"] not in api.client.get("/console/review/disputes").text


def test_review_queue_refuses_bad_decisions_and_unknown_queues(api: Api) -> None:
    _agent, contra = _dispute(api)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    path = f"/console/review/disputes/{contra['dispute_id']}"
    assert api.client.post(path, data={"decision": "bogus", "csrf": csrf}).status_code == 400
    assert (
        api.client.post(path, data={"decision": "edit", "content": "a\x00b", "csrf": csrf}).status_code == 400
    )
    assert api.client.get("/console/review/nothing").status_code == 404
    assert api.call(admin, "/v1/admin/disputes", method="GET").json()["items"][0]["status"] == "open"


def _decide(api: Api, csrf: str, queue: str, item: object, **form: str) -> Any:
    return api.client.post(
        f"/console/review/{queue}/{item}", data={"csrf": csrf, **form}, follow_redirects=False
    )


def test_findings_queue_resolves_in_one_click(api: Api) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    page = api.client.get("/console/review/findings")
    assert page.status_code == 200
    assert str(seeded.finding) in page.text
    for memory in seeded.memories[:2]:  # the pair, each a link to its history
        assert f'href="/console/memory/{memory}"' in page.text
    assert [
        b for b in ("keep_a", "keep_b", "both_valid", "dismiss") if f">{b}</button>" not in page.text
    ] == []
    assert _decide(api, csrf, "findings", seeded.finding, decision="keep_old").status_code == 400
    assert _decide(api, csrf, "findings", seeded.finding, decision="keep_b").status_code == 303
    resolved = api.call(admin, "/v1/admin/findings?status=resolved", method="GET").json()["items"]
    assert [(f["id"], f["decision"], f["reviewer"]) for f in resolved] == [
        (str(seeded.finding), "keep_b", "boss")
    ]
    assert "Nothing to review" in api.client.get("/console/review/findings").text
    assert "keep_b" in api.client.get("/console/review/findings?status=resolved").text
    assert ("resolve_finding", "ok") in ops_of(api, "boss")


def test_a_finding_is_decided_with_the_reviewers_reason(api: Api) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    page = api.client.get("/console/review/findings").text
    row = page.split('<table id="queue">', 1)[1]  # the item's own form (the bulk form is above)
    assert row.count('name="reason"') == row.count('name="decision" value="keep_a"') == 1
    form = {"decision": "both_valid", "reason": "two different clusters"}
    assert _decide(api, csrf, "findings", seeded.finding, **form).status_code == 303
    resolved = api.call(admin, "/v1/admin/findings?status=resolved", method="GET").json()["items"]
    assert [(f["decision"], f["resolution_reason"]) for f in resolved] == [
        ("both_valid", "two different clusters")
    ]


def test_a_dispute_edit_without_its_text_is_refused_before_the_api(api: Api) -> None:
    _agent, contra = _dispute(api)
    csrf = login(api, api.key("acme", "boss", "admin"))
    refused = _decide(api, csrf, "disputes", contra["dispute_id"], decision="edit", content=" ")
    assert refused.status_code == 400
    assert "needs the content field" in refused.text


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_proposals_queue_edits_then_approves_or_rejects(api: Api, action: str) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    page = api.client.get("/console/review/proposals")
    assert str(seeded.proposal) in page.text
    assert 'name="content" placeholder="the text to publish (for edit)"' in page.text
    edited = _decide(api, csrf, "proposals", seeded.proposal, decision="edit", content="Staging: Sundays")
    assert edited.status_code == 303, edited.text
    listed = api.call(admin, "/v1/admin/proposals", method="GET").json()["items"]
    assert [(p["id"], p["edited"]) for p in listed if p["id"] == str(seeded.proposal)] == [
        (str(seeded.proposal), True)
    ]
    assert _decide(api, csrf, "proposals", seeded.proposal, decision=action).status_code == 303
    status = {"approve": "approved", "reject": "rejected"}[action]
    closed = api.call(admin, f"/v1/admin/proposals?status={status}", method="GET").json()["items"]
    assert [p["id"] for p in closed] == [str(seeded.proposal)]
    assert str(seeded.proposal) not in api.client.get("/console/review/proposals").text
    ops = ops_of(api, "boss")
    assert ("edit_proposal", "ok") in ops
    assert (f"{action}_proposal", "ok") in ops


def test_decisions_queue_overturns_with_a_reason(api: Api) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    page = api.client.get("/console/review/decisions")
    assert str(seeded.decision) in page.text
    done = _decide(api, csrf, "decisions", seeded.decision, decision="overturn", reason="midnight is right")
    assert done.status_code == 303, done.text
    overturned = api.call(admin, "/v1/admin/decisions?status=overturned", method="GET").json()["items"]
    assert [(d["id"], d["overturn_reason"]) for d in overturned] == [
        (str(seeded.decision), "midnight is right")
    ]
    assert "Nothing to review" in api.client.get("/console/review/decisions").text
    again = _decide(api, csrf, "decisions", seeded.decision, decision="overturn")  # no reason: still a body
    assert again.status_code in {400, 409}, again.text  # already overturned: the API's answer, as a page
    assert "Refused" in again.text


def test_queue_actions_need_the_csrf_token_and_an_admin(api: Api) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    auditor = api.key("acme", "ann", "auditor")
    login(api, admin)
    items = (("findings", seeded.finding, "dismiss"), ("proposals", seeded.proposal, "approve"))
    for queue, item, action in (*items, ("decisions", seeded.decision, "overturn")):
        for token in ({}, {"csrf": "0" * 64}):
            answer = api.client.post(f"/console/review/{queue}/{item}", data={"decision": action, **token})
            assert answer.status_code == 403, (queue, token)
    assert len(api.call(admin, "/v1/admin/findings", method="GET").json()["items"]) == 1
    assert len(api.call(admin, "/v1/admin/decisions?status=settled", method="GET").json()["items"]) == 1
    assert str(seeded.proposal) in api.client.get("/console/review/proposals").text
    csrf = login(api, auditor)
    for queue in ("findings", "proposals", "decisions"):
        assert api.client.get(f"/console/review/{queue}").status_code == 403
    assert _decide(api, csrf, "findings", seeded.finding, decision="dismiss").status_code == 403
    assert len(api.call(admin, "/v1/admin/findings", method="GET").json()["items"]) == 1


def test_checkpoints_page_lists_what_the_ledger_signed_and_verifies_against_one(api: Api) -> None:
    auditor = api.key("acme", "ann", "auditor")
    csrf = login(api, auditor)
    assert "No checkpoints yet" in api.client.get("/console/checkpoints").text
    made = [api.call(auditor, "/v1/compliance/ledger/checkpoint").json() for _ in range(3)]
    page = api.client.get("/console/checkpoints")
    assert page.status_code == 200
    rows = re.findall(r"<tr><td>(\d+)</td><td>[^<]+</td><td>([0-9a-f]{64})</td>", page.text)
    assert rows == [(str(c["position"]), c["hash"]) for c in reversed(made)]
    hidden = re.findall(r"name=\"checkpoint\" value='([^']+)'", page.text)
    assert len(hidden) == 3
    pasted = hidden[0].replace("&#34;", '"')
    assert json.loads(pasted) == made[-1]
    against = api.client.post("/console/ledger/verify", data={"csrf": csrf, "checkpoint": pasted})
    assert "The chain holds" in against.text, against.text
    assert ("compliance.checkpoints", "ok") in ops_of(api, "ann")


def test_policies_view_and_edit(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    shown = api.client.get("/console/policies", params={"namespace": "acme/eng"})
    assert shown.status_code == 200
    assert "rate_limit_per_minute" in shown.text
    body = '{"rate_limit_per_minute": 77, "expected_version": 0}'
    saved = api.client.post("/console/policies", data={"namespace": "acme/eng", "policy": body, "csrf": csrf})
    assert saved.status_code == 200, saved.text
    assert api.call(admin, "/v1/admin/policies/acme/eng", method="GET").json()["rate_limit_per_minute"] == 77
    for bad in ('{"rate_limit_per_minute": ', '{"bogus": 1}', '{"directives": ["\\u0000"]}', "[" * 100):
        refused = api.client.post(
            "/console/policies", data={"namespace": "acme/eng", "policy": bad, "csrf": csrf}
        )
        assert refused.status_code in {400, 409}, bad
    assert ("admin.policies.put", "ok") in ops_of(api, "boss")


def test_projections_page_and_rebuild_for_the_owner(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    csrf = login(api, owner)
    page = api.client.get("/console/projections")
    assert page.status_code == 200
    name = re.search(r"/console/projections/([a-z_]+)/rebuild", page.text)
    assert name is not None
    rebuilt = api.client.post(f"/console/projections/{name.group(1)}/rebuild", data={"csrf": csrf})
    assert rebuilt.status_code == 200, rebuilt.text
    assert f"Rebuilt {name.group(1)}" in rebuilt.text
    assert ("ops.projections.rebuild", "ok") in ops_of(api, "olga")
    assert api.client.post("/console/projections/nope/rebuild", data={"csrf": csrf}).status_code == 404


def test_ledger_verify_checkpoint_and_verify_against_it(api: Api) -> None:
    auditor = api.key("acme", "ann", "auditor")
    csrf = login(api, auditor)
    verified = api.client.post("/console/ledger/verify", data={"csrf": csrf})
    assert "The chain holds" in verified.text
    made = api.client.post("/console/ledger/checkpoint", data={"csrf": csrf})
    found = re.search(r'<pre id="checkpoint">(.*?)</pre>', made.text, re.S)
    assert found is not None
    checkpoint = found.group(1).replace("&#34;", '"')
    against = api.client.post("/console/ledger/verify", data={"csrf": csrf, "checkpoint": checkpoint})
    assert "The chain holds" in against.text, against.text
    forged = checkpoint.replace('"signature": "', '"signature": "00')
    assert (
        api.client.post("/console/ledger/verify", data={"csrf": csrf, "checkpoint": forged}).status_code
        == 400
    )
    ops = ops_of(api, "ann")
    assert ("compliance.ledger.verify", "ok") in ops
    assert ("compliance.ledger.checkpoint", "ok") in ops


def test_certificate_verification(api: Api) -> None:
    member = api.key("acme/eng", "mia", "member")
    auditor = api.key("acme", "ann", "auditor")
    written = api.mem(member, "write", {"content": "erase me"}).json()
    api.settle()
    admin = api.key("acme/eng", "boss", "admin")
    forgot = api.mem(admin, "forget", {"ids": [written["id"]], "reason": "request"})
    assert forgot.status_code == 200, forgot.text
    certificate = json.dumps(forgot.json()["certificate"])
    csrf = login(api, auditor)
    valid = api.client.post("/console/certificates", data={"csrf": csrf, "certificate": certificate})
    assert valid.status_code == 200, valid.text
    assert "Valid certificate" in valid.text
    tampered = certificate.replace('"reason": "request"', '"reason": "forged"')
    assert tampered != certificate
    refused = api.client.post("/console/certificates", data={"csrf": csrf, "certificate": tampered})
    assert "Invalid" in refused.text or refused.status_code == 400
    assert (
        api.client.post("/console/certificates", data={"csrf": csrf, "certificate": "{"}).status_code == 400
    )


def test_a_revoked_key_ends_the_session_at_its_next_page(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    auditor = api.key("acme", "ann", "auditor")
    login(api, auditor)
    key_id = next(
        k["key_id"]
        for k in api.call(owner, "/v1/admin/keys", method="GET").json()["items"]
        if k["actor"] == "ann"
    )
    assert api.call(owner, "/v1/admin/keys/revoke", {"key_id": key_id}).status_code == 200
    page = api.client.get("/console/audit")
    assert page.status_code == 401
    assert "Sign in" in page.text
    assert "max-age=0" in page.headers["set-cookie"].lower()
    assert ("compliance.audit", "ok") not in [(r.op, r.outcome) for r in api.audit_records()][-3:]


def test_a_cross_site_post_is_refused_even_at_login(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    evil = {"origin": "https://evil.example"}
    refused = api.client.post("/console/login", data={"key": admin}, headers=evil, follow_redirects=False)
    assert refused.status_code == 403
    assert "set-cookie" not in refused.headers
    csrf = login(api, admin)
    made = api.client.post(
        "/console/keys", data={"target": "acme", "actor": "x", "role": "agent", "csrf": csrf}, headers=evil
    )
    assert made.status_code == 403
    same = {"origin": BASE}
    assert api.client.post("/console/ledger/checkpoint", data={"csrf": csrf}, headers=same).status_code == 200


def test_poison_form_bytes_get_an_error_page_never_a_500(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    form = {"content-type": "application/x-www-form-urlencoded"}
    for actor in ("a%00b", "%ED%A0%80", "%FF%FE"):
        body = f"csrf={csrf}&target=acme/eng&role=agent&actor={actor}"
        answer = api.client.post("/console/keys", content=body.encode(), headers=form)
        assert 400 <= answer.status_code < 500, (actor, answer.status_code)
        assert "Refused" in answer.text
    assert [k["actor"] for k in api.call(admin, "/v1/admin/keys", method="GET").json()["items"]] == ["boss"]


def test_a_bulk_decision_needs_ticked_ids_and_decides_each_through_the_api(api: Api) -> None:
    seeded = seed_review_queues(api.runtime)
    admin = api.key("acme", "boss", "admin")
    csrf = login(api, admin)
    bulk = "/console/review/findings/bulk"
    nothing = api.client.post(bulk, data={"csrf": csrf, "decision": "dismiss"}, follow_redirects=False)
    assert nothing.status_code == 400
    assert "no item is selected" in nothing.text
    garbage = {"csrf": csrf, "decision": "dismiss", "ids": "not-an-id"}
    assert api.client.post(bulk, data=garbage, follow_redirects=False).status_code == 400
    unknown = {"csrf": csrf, "decision": "shrug", "ids": str(seeded.finding)}
    assert api.client.post(bulk, data=unknown, follow_redirects=False).status_code == 400
    ticked = {"csrf": csrf, "decision": "both_valid", "ids": str(seeded.finding), "reason": "two clusters"}
    assert api.client.post(bulk, data=ticked, follow_redirects=False).status_code == 303
    resolved = api.call(admin, "/v1/admin/findings?status=resolved", method="GET").json()["items"]
    assert [(f["id"], f["decision"], f["resolution_reason"]) for f in resolved] == [
        (str(seeded.finding), "both_valid", "two clusters")
    ]
    assert ("resolve_finding", "ok") in ops_of(api, "boss")
