"""How long a backtest takes per 1,000 replayed firings, beside the same firings through
the bare engine measured in the same run.

    python bench/bench_backtest.py [--firings 1000] [--repeat 3]

The history is a week of payout firings (three transfers and a bonus each), recorded by
driving the bare engine over them with every effect answered from a script: that
recording is the baseline (``advance`` and nothing else: no admission, no ledger, no
chain, no diff). Then, over the same history:

- a candidate identical to the deployed project: both versions replayed in the sandbox
  (admission, the budget ledger, every send answered from the record) and diffed;
- a candidate that doubles every bonus: each run's changed send simulated on the local
  stack's anvil (``eth_call`` and ``eth_estimateGas`` at the firing's block, through
  ``RFLOW_RPC_URL_LOCAL``), the rest answered from the record.

Prints the best of ``--repeat`` runs of each, per 1,000 firings, and the ratio to the
baseline. Nothing is sent, signed or written.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(REPO) not in sys.path:  # for tests.unit.backtest.world (not an installed package)
    sys.path.insert(0, str(REPO))

from _report import emit  # noqa: E402

from rflow.backtest.chain import Chain  # noqa: E402
from rflow.backtest.run import Projects, replay, report  # noqa: E402
from rflow.settings import Settings  # noqa: E402
from tests.unit.backtest.world import MILLI, T0, firing, record  # noqa: E402
from tests.unit.backtest.world import project as load  # noqa: E402

DEV = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
"""anvil's first development account: funded on the local chain, so its simulated
transfers do not revert."""

PROJECT = """
budgets:
  daily: {{ window: 24h, max_native_value: 1000 ether, scope: {{ relayers: [payout] }} }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [daily]
    steps:
      - id: pay
        foreach: "${{{{ inputs.payments }}}}"
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ item.to }}}}"
          value: "${{{{ item.value }}}}"
      - id: bonus
        send_transaction:
          network: local
          relayer: payout
          to: "0x00000000000000000000000000000000000000b0"
          value: "${{{{ str(inputs.bonus * {factor}) }}}}"
"""


def project(factor: int):
    text = PROJECT.format(factor=factor)
    return load(text.replace('address: "0x00000000000000000000000000000000000000aa"', ""))


def firings(count: int) -> list:
    spread = timedelta(days=7) / count
    return [
        firing(
            "pay",
            f"manual:{i}",
            {
                "payments": [
                    {"to": f"0x{(i * 3 + k + 1):040x}", "value": str((k + 1) * MILLI)}
                    for k in range(3)
                ],
                "bonus": 1000 + i,
            },
            T0 + spread * i,
        )
        for i in range(count)
    ]


def best(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--firings", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = Settings.from_env()
    deployed, doubled = project(1), project(2)
    fired = firings(args.firings)
    per = 1000 / args.firings

    async with Chain(settings, [deployed], {}) as chain:
        head = await chain.head("local")
    history = record(deployed, fired, block=head, relayer=DEV)
    baseline = best(args.repeat, lambda: record(deployed, fired, block=head, relayer=DEV))

    async def backtest(candidate) -> tuple[float, object]:
        async with Chain(settings, [candidate, deployed], {}) as chain:
            started = time.perf_counter()
            projects = Projects(deployed, candidate)
            old, new = await replay(history, projects, chain, {})
            base = {
                "candidate": "bench",
                "started_at": T0,
                "window_from": history.window.start,
                "window_to": history.window.end,
                "workflows": ["pay"],
            }
            found = report(base, history, projects, old, new, T0)
            return time.perf_counter() - started, found

    same = []
    for _ in range(args.repeat):
        seconds, found = await backtest(deployed)
        assert found.outcome == "same", found.runs[:1]
        same.append(seconds)
    changed = []
    for _ in range(args.repeat):
        seconds, found = await backtest(doubled)
        assert len(found.runs) == args.firings, (len(found.runs), found.marks)
        assert all(r.new.sends[-1].source == "simulated" for r in found.runs)
        changed.append(seconds)

    def row(what: str, seconds: float) -> tuple[str, ...]:
        value = seconds * per
        return (
            what,
            f"{value * 1000:.0f} ms",
            f"{baseline * per * 1000:.0f} ms",
            f"{value / (baseline * per):.1f}x",
            "-",
            "-",
        )

    emit(
        "backtest",
        [
            (
                "bare engine, per 1,000 firings (baseline)",
                f"{baseline * per * 1000:.0f} ms",
                "-",
                "1.0x",
                "-",
                "-",
            ),
            row("backtest, nothing changed (both versions, every send recorded)", min(same)),
            row("backtest, a new amount in every run (simulated on anvil)", min(changed)),
        ],
    )
    print(
        f"\n{args.firings} firings of 4 sends each over 7 days; best of {args.repeat}; "
        f"a changed send is 2 JSON-RPC calls on {settings.rpc_url('local')}"
    )


if __name__ == "__main__":
    asyncio.run(main())
