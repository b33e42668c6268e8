"""rflow: YAML-declared workflows for blockchain automation on Kafka, Faust and Postgres."""

__version__ = "0.1.0"
