# etcd variant: the deps layer (sshd, entrypoint, the same base as ember's
# image) plus Debian bookworm's etcd-server and etcd-client (3.4.23),
# installed offline from .deb files fetched on the host with `apt-get
# download`: dpkg, not apt, so nothing is fetched inside the build. The
# policy-rc.d stops the package from trying to start a service: the harness
# starts etcd itself, over SSH.
ARG DEPS
FROM ${DEPS}
COPY debs/ /tmp/debs/
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d \
 && dpkg -i /tmp/debs/*.deb \
 && rm -rf /tmp/debs /usr/sbin/policy-rc.d \
 && /usr/bin/etcd --version | head -1 \
 && mkdir -p /var/lib/etcd /etc/faultline-etcd /var/log/etcd
