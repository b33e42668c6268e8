-- Who owns what: each worker reports its Kafka client id and the partitions it holds,
-- per topic, as the active owner and as a standby copy (rflow workers, runs show --live).
ALTER TABLE deployment_workers
    ADD COLUMN client_id  text,
    ADD COLUMN assignment jsonb NOT NULL DEFAULT '{}'::jsonb;
