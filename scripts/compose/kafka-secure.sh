#!/usr/bin/env bash
# The secured Kafka of docker-compose.kafka.yml (profile `secure`), run in the
# apache/kafka image: formats its storage with the SCRAM users of `scripts/stack
# compose-secure` (admin, rflow, producer), starts the broker with the configuration that
# script rendered (SASL_SSL on 9094, mutual TLS between broker and controller, KRaft's
# StandardAuthorizer), applies the ACLs `rflow kafka acls` printed, and marks itself
# healthy once they are in place.
set -euo pipefail
SECURE=/etc/kafka/secure
CONFIG=$SECURE/docker/server.properties
BIN=/opt/kafka/bin
[ -f "$CONFIG" ] || { echo "$CONFIG is missing: run scripts/stack compose-secure first" >&2; exit 1; }
rm -f /tmp/acls-applied
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
    scram=()
    for who in admin rflow producer; do
        password=$(cat "$SECURE/$who.password")
        scram+=(--add-scram "SCRAM-SHA-512=[name=$who,password=$password]"
            --add-scram "SCRAM-SHA-256=[name=$who,password=$password]")
    done
    "$BIN/kafka-storage.sh" format -t "$("$BIN/kafka-storage.sh" random-uuid)" -c "$CONFIG" "${scram[@]}"
fi
"$BIN/kafka-server-start.sh" "$CONFIG" &
broker=$!
trap 'kill -TERM "$broker" 2>/dev/null; wait "$broker"' TERM INT
until "$BIN/kafka-broker-api-versions.sh" --bootstrap-server 127.0.0.1:9094 \
    --command-config "$SECURE/docker/admin.properties" >/dev/null 2>&1; do
    kill -0 "$broker" 2>/dev/null || { wait "$broker"; exit 1; }
    sleep 1
done
while IFS= read -r line; do
    case "$line" in "kafka-acls "*) ;; *) continue ;; esac
    # shellcheck disable=SC2086
    "$BIN/kafka-acls.sh" ${line#kafka-acls } >/dev/null
done <"$SECURE/docker/acls"
touch /tmp/acls-applied
wait "$broker"
