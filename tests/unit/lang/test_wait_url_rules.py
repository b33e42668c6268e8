"""``${{ wait.url }}`` in the language: alone, handed to an effect that fills it in, naming
a webhook wait after the step whose URL is known before it parks."""

from __future__ import annotations

from tests.unit.lang.conftest import findings

NONE = "auth: { type: none }"


def errors(text: str) -> list[str]:
    return [f for f in findings(text) if ": error: " in f]


def test_wait_url_is_taken_where_an_effect_fills_it_in() -> None:
    assert (
        errors(
            f"""\
        workflows:
          w:
            trigger: {{ manual: {{}} }}
            steps:
              - {{ id: a, notify: {{ channel: ops, message: "go to ${{{{ wait.url }}}}" }} }}
              - {{ id: b, http_call: {{ url: "http://x.test/", body: {{ callback: "${{{{ wait.url }}}}" }} }} }}
              - {{ id: c, wait_for: {{ webhook: {{ path: /hooks/c, {NONE} }} }} }}
        """
        )
        == []
    )


def test_wait_url_elsewhere_is_refused_where_it_is_written() -> None:
    assert errors(
        f"""\
        workflows:
          w:
            trigger: {{ manual: {{}} }}
            steps:
              - {{ id: a, if: "${{{{ wait.url != '' }}}}", notify: {{ channel: ops, message: hi }} }}
              - {{ id: b, notify: {{ channel: ops, message: "${{{{ upper(wait.url) }}}}" }} }}
              - {{ id: c, state_set: {{ u: "${{{{ wait.url }}}}" }} }}
              - {{ id: c2, notify: {{ channel: ops, message: "${{{{ wait.url }}}}" }} }}
              - {{ id: d, wait_for: {{ webhook: {{ path: "/hooks/d/${{{{ run.id }}}}", {NONE} }} }} }}
              - {{ id: e, notify: {{ channel: ops, message: "${{{{ wait.token }}}}" }} }}
              - {{ id: e2, notify: {{ channel: ops, message: "${{{{ wait.url }}}}" }} }}
              - {{ id: f, foreach: [1], wait_for: {{ webhook: {{ {NONE} }} }} }}
              - {{ id: g, notify: {{ channel: ops, message: "${{{{ wait.url }}}}" }} }}
            finally:
              - {{ id: z, notify: {{ channel: ops, message: "${{{{ wait.url }}}}" }} }}
        """
    ) == [
        "wf.yaml:5:27: error: workflows.w.steps[0].if: " + ALONE,
        "wf.yaml:6:62: error: workflows.w.steps[1].notify.message: " + ALONE,
        "wf.yaml:7:39: error: workflows.w.steps[2].state_set.u: wait.url can only be handed to "
        "an http_call (url, headers, body), a notify (message) or a command (args): it is "
        "filled in when their effect runs",
        "wf.yaml:8:57: error: workflows.w.steps[3].notify.message: wait.url names the webhook "
        "wait 'd', whose path holds an expression: give that wait a literal path (or none) so "
        "its URL is known before it parks",
        "wf.yaml:10:56: error: workflows.w.steps[5].notify.message: " + ALONE,
        "wf.yaml:11:57: error: workflows.w.steps[6].notify.message: wait.url names the webhook "
        "wait after this step, 'f', which runs per item (each item has a URL of its own): it "
        "cannot name one",
        "wf.yaml:13:56: error: workflows.w.steps[8].notify.message: wait.url names the webhook "
        "wait that comes after this step in steps, and there is none",
        "wf.yaml:15:56: error: workflows.w.finally[0].notify.message: wait.url names the "
        "webhook wait that comes after this step in finally, and there is none",
    ]


ALONE = (
    "write wait.url alone, as ${{ wait.url }} (wait offers url only): the URL carries the "
    "wait's token and is filled in when the effect runs"
)
