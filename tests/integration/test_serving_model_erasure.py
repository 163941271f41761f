"""The served model of an index no model was adopted for is named by the first memory
vector. When that memory is erased, a replay from zero never sees its vector, so the live
index hands the name to the earliest vector left, and a rebuild equals it."""

from __future__ import annotations

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder

AGENT = Identity("acme/x", "a", "agent")
ADMIN = Identity("acme/x", "lead", "admin")


def serving(rt: Runtime) -> list[dict[str, object]]:
    with rt.ledger.datastore.get_connection() as conn:
        return list(conn.execute(f"SELECT model, named_by FROM {rt.ledger.schema}.search_serving").fetchall())


def rebuilt_equal(rt: Runtime) -> None:
    rt.reads.wait_for(rt.ledger.head_position())
    report = Rebuilder(rt.reads.runner).rebuild("search_index", verify=True)
    assert report.differences == []


def test_erasing_the_memory_that_named_the_model_hands_the_name_on(settings: Settings) -> None:
    with Runtime(settings) as rt:
        first = rt.memory.write(AGENT, WriteMemory(content="Dana lives in Lyon"))
        second = rt.memory.write(AGENT, WriteMemory(content="the build runs on Tuesdays"))
        rt.reads.wait_for(rt.ledger.head_position())
        assert [r["named_by"] for r in serving(rt)] == [first.id]
        rebuilt_equal(rt)

        rt.core.erasure.forget(ADMIN, Forget(ids=(first.id,), reason="asked to"))
        rt.reads.wait_for(rt.ledger.head_position())
        assert [r["named_by"] for r in serving(rt)] == [second.id]
        rebuilt_equal(rt)

        rt.core.erasure.forget(ADMIN, Forget(ids=(second.id,), reason="asked to"))
        rt.reads.wait_for(rt.ledger.head_position())
        assert serving(rt) == []
        rebuilt_equal(rt)
