#!/bin/sh
# Container entrypoint: per-container host keys, the cluster's public key
# (passed in FAULTLINE_AUTHORIZED_KEY) for root, then sshd in the foreground.
set -eu
mkdir -p /run/sshd /root/.ssh /run/faultline /var/log/faultline
chmod 700 /root/.ssh
if [ -n "${FAULTLINE_AUTHORIZED_KEY:-}" ]; then
    printf '%s\n' "$FAULTLINE_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
    chmod 600 /root/.ssh/authorized_keys
fi
ssh-keygen -A >/dev/null
exec /usr/sbin/sshd -D -e
