"""Amounts in ``/metrics`` are written digit for digit, not as floats."""

from __future__ import annotations

from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rflow.streams.metrics import Metrics


def test_wei_and_raw_units_are_exported_as_exact_integers():
    metrics = Metrics()
    metrics.gas_spent.labels("local", "payout").set(Decimal(20_000_000_000_000_000))
    metrics.budget_cap.labels("daily", "native").set(10**18 + 1)
    metrics.budget_consumed.labels("daily", "native").set(0)
    metrics.budget_remaining.labels("daily", 'say "hi"\\').set(10**18 + 1)
    text = metrics.render().decode()
    assert 'rflow_gas_spent_wei{network="local",relayer="payout"} 20000000000000000\n' in text
    assert 'rflow_budget_cap{asset="native",budget="daily"}' not in text  # label order kept
    assert 'rflow_budget_cap{budget="daily",asset="native"} 1000000000000000001\n' in text
    assert "e+" not in text.split("rflow_budget_cap", 1)[1]
    # The whole page still parses as the exposition format, escaped labels included.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["rflow_gas_spent_wei"].type == "gauge"
    [remaining] = families["rflow_budget_remaining"].samples
    assert remaining.labels == {"budget": "daily", "asset": 'say "hi"\\'}
    assert "rflow_circuit_state" in families  # the float gauges are there as before


def test_a_fraction_is_refused_rather_than_cut():
    metrics = Metrics()
    with pytest.raises(ValueError, match="whole numbers"):
        metrics.gas_spent.labels("local", "payout").set(Decimal("1.5"))
    with pytest.raises(ValueError, match="takes labels network, relayer"):
        metrics.gas_spent.labels("local")
