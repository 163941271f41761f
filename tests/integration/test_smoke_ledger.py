from memwarden.bootstrap.core import Core
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity


def test_a_write_is_on_a_verified_chain(core: Core) -> None:
    agent = Identity("acme/eng", "agent-1", "agent")
    result = core.memory.write(agent, WriteMemory(content="The deploy window is Tuesday 10:00 UTC"))
    assert result.outcome == "stored"
    report = core.ledger.verify()
    assert report.ok
    assert report.checked == result.position
