"""The authorization decision, tested as a table: every action against every role, then
``can``, approvers, unknown actions and missing principals."""

from __future__ import annotations

import pytest

from rflow import authz
from rflow.authz import Principal, Target, decide

# What each role may do, written out here rather than read from ACTIONS: a change to the
# policy must change this table too.
EXPECTED: dict[str, set[str]] = {
    "none": set(),
    "viewer": {"metrics.read", "runs.read", "audit.read", "state.read", "backtests.read"},
    "approver": {
        "metrics.read",
        "runs.read",
        "audit.read",
        "state.read",
        "backtests.read",
        "approvals.answer",
    },
    "operator": {
        "metrics.read",
        "runs.read",
        "audit.read",
        "state.read",
        "backtests.read",
        "backtests.run",
        "approvals.answer",
        "runs.run",
        "runs.retry",
        "runs.resend",
        "runs.cancel",
        "runs.signal",
        "sends.speedup",
        "sends.cancel",
        "workflows.pause",
        "schedules.toggle",
        "dead_letters.replay",
        "deploy",
        "deploy.rollback",
    },
}


def test_the_table_names_every_action_the_surfaces_use():
    assert set(authz.ACTIONS) == EXPECTED["operator"]
    assert authz.ROLES == ("none", "viewer", "approver", "operator")


@pytest.mark.parametrize("role", authz.ROLES)
@pytest.mark.parametrize("action", sorted(EXPECTED["operator"]))
def test_each_role_may_take_exactly_its_actions(role, action):
    who = Principal.of("someone", role)
    decision = decide(who, action, Target("run", "r1"))
    assert decision.allowed is (action in EXPECTED[role])
    # Either way the decision says who, what and on what.
    assert "'someone'" in decision.why and action in decision.why and "run r1" in decision.why
    if not decision.allowed:
        assert f"needs role {authz.ACTIONS[action].role}" in decision.why


def test_a_refusal_names_the_principal_its_role_and_what_it_would_need():
    decision = decide(Principal.of("alice", "approver"), "runs.retry", Target("run", "r9"))
    assert not decision
    assert decision.why == (
        "principal 'alice' (approver) may not runs.retry on run r9: that needs role operator "
        "(or runs.retry in the principal's can)"
    )


def test_can_grants_actions_beyond_the_role_and_nothing_else():
    scraper = Principal.of("prometheus", "none", ["metrics.read"])
    assert decide(scraper, "metrics.read")
    assert "its can lists it" in decide(scraper, "metrics.read").why
    assert not decide(scraper, "runs.read")
    lead = Principal.of("lead", "approver", ["runs.cancel"])
    assert decide(lead, "runs.cancel") and decide(lead, "approvals.answer")
    assert not decide(lead, "runs.retry")
    assert authz.allowed_actions(scraper) == {"metrics.read"}
    assert authz.allowed_actions(lead) == EXPECTED["approver"] | {"runs.cancel"}


def test_an_approval_that_lists_approvers_is_answered_by_them_alone():
    listed = Target("approval", "r1 review", ("alice", "operator"))
    assert decide(Principal.of("alice", "approver"), "approvals.answer", listed)
    assert decide(Principal.of("operator", "operator"), "approvals.answer", listed)
    bob = decide(Principal.of("bob", "approver"), "approvals.answer", listed)
    assert not bob and "not one of its approvers (alice, operator)" in bob.why
    # Being listed does not lift the role: a viewer may not answer at all.
    viewer = decide(Principal.of("alice", "viewer"), "approvals.answer", listed)
    assert not viewer and "needs role approver" in viewer.why
    # An approval that lists no one is answered by anyone who may answer approvals.
    assert decide(Principal.of("bob", "approver"), "approvals.answer", Target("approval", "x"))


def test_an_unknown_action_and_a_missing_principal_are_refused_to_everyone():
    operator = Principal.of("operator", "operator")
    unknown = decide(operator, "runs.delete")
    assert not unknown and "not an action rflow knows" in unknown.why
    nobody = decide(None, "runs.read")
    assert not nobody and "needs a principal's token" in nobody.why


def test_the_audit_trail_keeps_only_an_actions_named_arguments():
    given = {"reason": "x" * 300, "token": "s3cret", "from": "pay", "yes": True}
    assert authz.arguments("runs.cancel", given) == {"reason": "x" * 200 + "…"}
    assert authz.arguments("runs.retry", given) == {"from": "pay", "yes": True}
    assert authz.arguments("sends.cancel", given) == {}
    assert authz.arguments("nope", given) == {}


def test_reads_are_not_written_to_the_trail_and_actions_are():
    assert {a.name for a in authz.ACTIONS.values() if not a.audited} == {
        "metrics.read",
        "runs.read",
        "audit.read",
        "state.read",
        "backtests.read",
    }
