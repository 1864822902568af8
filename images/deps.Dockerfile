# Deps layer: a venv with ember-node's run-time dependencies only, installed
# offline from a wheelhouse built on the host, plus sshd set-up. The base is
# always a local image (bootstrapped or already present), never pulled here.
ARG BASE
FROM ${BASE}
COPY wheels/ /tmp/wheels/
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/faultline \
 && /opt/faultline/bin/pip install --quiet --no-index --find-links /tmp/wheels -r /tmp/requirements.txt \
 && rm -rf /tmp/wheels /root/.cache
COPY sshd_faultline.conf /etc/ssh/sshd_config.d/faultline.conf
COPY entrypoint.sh /usr/local/sbin/faultline-entrypoint
RUN chmod 0755 /usr/local/sbin/faultline-entrypoint && mkdir -p /run/faultline /var/log/faultline
ENV PATH=/opt/faultline/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["/usr/local/sbin/faultline-entrypoint"]
