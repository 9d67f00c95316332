"""The Prometheus text format for our own families, and the HTTP server that serves it.

A family keeps its samples as exposition lines, formatted when they are added: our label
names are fixed names from code, so only label values need escaping, and a scrape of 5,000
series makes 5,000 strings (which the garbage collector does not track) rather than 5,000
sample tuples with label dicts. Same format as prometheus_client's writer (text 0.0.4:
counters named ``_total`` in HELP, TYPE and samples), same gzip negotiation.
"""

from __future__ import annotations

import gzip
import os
import selectors
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GZIP_LEVEL = 1  # the body is small and regenerated per scrape: speed over ratio
NAMESPACE = "sglang_sentinel"  # the prefix of every metric we export, whichever layer builds it
_INF = float("inf")


def _escape_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    return repr(float(value))


class Family:
    """One metric family: a name (a counter's without ``_total``), its type and help, and its
    samples as exposition lines."""

    __slots__ = ("_template", "documentation", "lines", "name", "type")

    def __init__(
        self, name: str, documentation: str, type_: str, labelnames: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.type = type_
        self.documentation = documentation
        self.lines: list[str] = []
        sample = self.exposed_name
        # The label values and the number go in with %: values cannot inject a format.
        labels = ",".join(f'{label}="%s"' for label in labelnames)
        self._template = f"{sample}{{{labels}}} %s\n" if labelnames else f"{sample} %s\n"

    @property
    def exposed_name(self) -> str:
        return f"{self.name}_total" if self.type == "counter" else self.name

    def add(self, label_values: Sequence[str], value: float) -> None:
        """One sample; ``label_values`` in the order of the family's label names."""
        self.lines.append(
            self._template % (*[_escape_value(v) for v in label_values], _number(value))
        )


def gauge(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family:
    return Family(name, documentation, "gauge", labelnames)


def counter(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family:
    return Family(name, documentation, "counter", labelnames)


def sentinel_gauge(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family:
    """A gauge of ours: ``name`` without the namespace."""
    return gauge(f"{NAMESPACE}_{name}", documentation, labelnames)


def sentinel_counter(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family:
    """A counter of ours: ``name`` without the namespace (nor ``_total``)."""
    return counter(f"{NAMESPACE}_{name}", documentation, labelnames)


def render(families: Iterable[Family]) -> bytes:
    """Text exposition of ``families``: HELP and TYPE per family, then its samples."""
    out: list[str] = []
    for family in families:
        name = family.exposed_name
        out.append(f"# HELP {name} {_escape_help(family.documentation)}\n")
        out.append(f"# TYPE {name} {family.type}\n")
        out += family.lines
    return "".join(out).encode()


@dataclass(frozen=True)
class Response:
    """What a route other than /metrics answers."""

    status: int
    content_type: str
    body: bytes


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """Sleeps until a scrape or ``shutdown()``: socketserver's own loop wakes every 0.5 s to
    look for a shutdown request, ~0.02% of a core for nothing in a daemon that idles."""

    daemon_threads = True  # a slow scraper never holds up the daemon's exit

    def server_activate(self) -> None:
        super().server_activate()
        self._wake_fds = os.pipe()  # (read, write)
        self._stopped = threading.Event()

    def serve_forever(self, poll_interval: float | None = None) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_fds[0], selectors.EVENT_READ)
                while not any(key.fd == self._wake_fds[0] for key, _ in selector.select()):
                    self._handle_request_noblock()  # what socketserver's loop calls
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        os.write(self._wake_fds[1], b"\0")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        # server_close may come twice, or before server_activate (the bind failed)
        fds, self._wake_fds = getattr(self, "_wake_fds", ()), ()
        for fd in fds:
            os.close(fd)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass  # a line per scrape would drown the daemon's own log


def serve(
    host: str,
    port: int,
    families: Callable[[], Iterable[Family]],
    routes: Mapping[str, Callable[[], Response]] | None = None,
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` (and ``routes``, path -> answer) on host:port, and only there,
    from a background thread."""
    routes = dict(routes or {})

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in routes:
            answer = routes[path]()
            status = HTTPStatus(answer.status)
            start_response(
                f"{status.value} {status.phrase}",
                [
                    ("Content-Type", answer.content_type),
                    ("Content-Length", str(len(answer.body))),
                    ("Cache-Control", "no-store"),
                ],
            )
            return [answer.body]
        if path not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            known = ", ".join(["/metrics", *routes])
            return [f"not found: try {known}\n".encode()]
        body = render(families())
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    server = make_server(host, port, app, _ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="sentinel-metrics", daemon=True)
    thread.start()
    return server, thread
