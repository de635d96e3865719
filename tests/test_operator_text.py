"""What an operator is told to check fits the contract (issue 40, item 4): a blind
provider never received a key it keeps, so neither the review interrupt nor
``langgraph-effects show`` sends the operator looking for one; dedup and lookup
operations name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_effects import cli
from langgraph_effects._runtime.decisions import review_request

from .test_operator import make_op, seeded_ledger_file


@pytest.mark.parametrize("contract", ["blind", "dedup", "lookup", "lookup-eventual"])
def test_review_and_show_name_what_the_operator_can_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], contract: str
) -> None:
    db = tmp_path / "ledger.sqlite"
    [op] = seeded_ledger_file(db, (make_op(contract=contract), "review"))
    [request] = review_request([op])["action_requests"]
    description = request["description"]
    assert cli.main(["--db", str(db), "show", op.op_id]) == 0
    # What show tells the operator to do comes after the record (which lists the key as a field).
    shown = " ".join(capsys.readouterr().out.split("audit trail")[1].split())
    for text in (description, shown):
        assert "sent between " in text and " UTC" in text
        if contract == "blind":
            assert op.provider_key not in text
            assert "own records at the provider" in text and "with these arguments" in text
            assert "keeps no key of ours" in text
            assert "provider key" not in text
        else:
            assert f"Check the provider for key {op.provider_key}" in text
    assert request["args"] == dict(op.args)  # the arguments are in front of the reviewer
