"""Ingress: where trigger firings come from, and how they reach the triggers topic.

The HTTP ingress (webhooks and manual runs) knows no web framework;
:mod:`rflow.streams.ingress_views` mounts it on the worker's web server. A request is
acknowledged only once its firing is durably in Kafka (``acks=all``).
"""

from rflow.ingress.auth import sign, signature_matches
from rflow.ingress.jsonpath import JsonPathError, PathNotFound, extract
from rflow.ingress.manual import (
    IDEMPOTENCY_HEADER,
    ManualIngress,
    ManualRunError,
    check_inputs,
    manual_record,
    manual_workflow,
)
from rflow.ingress.request import (
    DEFAULT_MAX_BODY_BYTES,
    BodyError,
    Reply,
    payload_headers,
)
from rflow.ingress.webhooks import (
    Deliveries,
    Route,
    TriggerProducer,
    WebhookIngress,
    event_type_of,
    webhook_routes,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "IDEMPOTENCY_HEADER",
    "BodyError",
    "Deliveries",
    "JsonPathError",
    "ManualIngress",
    "ManualRunError",
    "PathNotFound",
    "Reply",
    "Route",
    "TriggerProducer",
    "WebhookIngress",
    "check_inputs",
    "event_type_of",
    "extract",
    "manual_record",
    "manual_workflow",
    "payload_headers",
    "sign",
    "signature_matches",
    "webhook_routes",
]
