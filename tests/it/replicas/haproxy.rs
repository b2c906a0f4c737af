//! Two replicas behind a real HAProxy (see `deploy/haproxy/haproxy.cfg`).
