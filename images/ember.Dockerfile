# Top layer: the faultline wheel built from the current source. Only this
# layer is rebuilt when ember's source changes.
ARG DEPS
FROM ${DEPS}
COPY dist/ /tmp/dist/
RUN /opt/faultline/bin/pip install --quiet --no-index --no-deps --force-reinstall /tmp/dist/*.whl \
 && rm -rf /tmp/dist /root/.cache
