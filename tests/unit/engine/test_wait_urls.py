"""``${{ wait.url }}``: the engine names the webhook wait after the step (its id at the
visit it will park in, and its path) and renders the placeholder, never a URL."""

from __future__ import annotations

from rflow.engine import Execute, Park, RunStatus, resume
from tests.unit.engine.driver import Driver, workflow

LOOP = """
trigger: { manual: {} }
steps:
  - id: ask
    notify: { channel: ops, message: "Confirm at ${{ wait.url }} please" }
  - id: confirmed
    wait_for:
      webhook: { path: /hooks/confirm, auth: { type: none } }
  - id: again
    choose:
      branches:
        - { when: "${{ steps.confirmed.output.body.more == true }}", goto: ask }
      default: { goto: done }
  - id: done
    http_call: { url: "http://x.test/done" }
"""


def test_a_step_names_the_wait_after_it_and_renders_only_the_placeholder():
    d = Driver(workflow(LOOP))
    d.start()
    [ask] = d.pending(Execute)
    assert ask.action["message"] == "Confirm at ${RFLOW_WAIT_URL} please"
    assert (ask.wait_id, ask.wait_path) == ("w:t1:confirmed", "/hooks/confirm")
    # A resumed run hands the executor the same wait.
    assert [e for e in resume(d.wf, d.state) if isinstance(e, Execute)] == [ask]
    [park] = [e for e in d.answer(ask, output={"delivered": True}) if isinstance(e, Park)]
    assert park.wait_id == ask.wait_id  # the wait the URL was made for is the one parked

    # Round the loop: the wait's next visit has a new id, so a new URL and token.
    d.resolve(park, {"body": {"more": True}})
    [ask2] = d.pending(Execute)
    assert ask2.visit == 2 and ask2.wait_id == "w:t1:confirmed#2"
    [park2] = [e for e in d.answer(ask2, output={"delivered": True}) if isinstance(e, Park)]
    assert park2.wait_id == ask2.wait_id
    d.resolve(park2, {"body": {"more": False}})
    [done] = d.pending(Execute)
    assert (done.wait_id, done.wait_path) == (None, None)  # it names no wait
    d.answer(done, output={})
    assert d.state.status == RunStatus.SUCCEEDED
