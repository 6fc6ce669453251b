"""`ubatch serve --ray`: the OpenAI app on Ray Serve. Joins the cluster at --ray-address (`auto`, `host:port`,
`ray://...`) or starts a local one, starts Serve's HTTP proxy at --host/--port (Serve's access log stays on),
deploys build_app(...) and waits. SIGTERM / SIGINT: the Serve app is deleted (replicas drain their in-flight
requests for up to --grace seconds), Serve and Ray are shut down, the process exits with status 0."""
from __future__ import annotations

import signal
import sys
import threading
import time

from ubatch.server.config import ServerConfig


def run(cfg: ServerConfig, *, address: str | None, replicas: int, replica_cpus: float, min_replicas=None,
        max_replicas=None, target_ongoing_requests=None, log_level: str = "warning") -> int:
    try:
        import ray
        from ray import serve
    except ImportError as e:
        print(f"ubatch serve --ray needs the [ray] extra (pip install 'ubatch[ray]'): {e}", file=sys.stderr)
        return 2
    from ubatch.ray.deployment import build_app
    engine = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__ if f != "model"}
    try:
        app = build_app(cfg.model, replicas, replica_cpus=replica_cpus, min_replicas=min_replicas,
                        max_replicas=max_replicas, target_ongoing_requests=target_ongoing_requests, **engine)
    except (TypeError, ValueError) as e:
        print(f"ubatch serve: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    if address:
        ray.init(address=address, logging_level=log_level.upper())
    else:      # a local cluster: its node address is --host when that is one address (loopback by default)
        node_ip = None if cfg.host in ("0.0.0.0", "::", "") else cfg.host
        ray.init(include_dashboard=False, logging_level=log_level.upper(), _node_ip_address=node_ip)
    try:
        serve.start(http_options={"host": cfg.host, "port": cfg.port})
        serve.run(app, name="ubatch", route_prefix="/", blocking=False)
        for sig in (signal.SIGTERM, signal.SIGINT):     # after ray.init: Ray installs its own (it would just die)
            signal.signal(sig, lambda *_: stop.set())
        print(f"ubatch serve: listening on http://{cfg.host}:{cfg.port} (model {cfg.served_id}, Ray Serve, "
              f"{replicas} replica(s) x {replica_cpus:g} CPU)", flush=True, file=sys.stderr)
        while not stop.wait(0.5):
            pass
        t0 = time.monotonic()
        serve.delete("ubatch")          # replicas stop taking requests and drain (graceful_shutdown_timeout_s)
        serve.shutdown()
        print(f"ubatch serve: Ray Serve app shut down in {time.monotonic() - t0:.1f} s", flush=True,
              file=sys.stderr)
    finally:
        ray.shutdown()
    return 0
