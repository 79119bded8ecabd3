"""A chat-completions server on the loopback interface that answers from a script, for the
tests of the reconciling learner (tests/integrations/test_llm.py, tests/cli_web/test_demo_learning.py). No network,
no model."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pymem.llm import ChatClient


Reply = dict[str, Any] | str | Callable[[dict[str, Any]], Any]


class ChatServer:
    """POST /v1/chat/completions answers the next scripted reply: a str (the assistant
    message's content), a callable(request body) returning a reply, or a dict with ``status``
    (an HTTP error), ``sleep`` (seconds before answering), ``drip`` (seconds between each of 10
    body pieces), ``raw`` (bytes sent as the body), ``headers`` (more response headers, e.g. a
    redirect's ``Location``), ``length`` (the Content-Length to declare instead of the body's),
    ``stream`` (bytes sent again and again, with no Content-Length, until the client leaves or 60
    s pass). With the script empty, ``responder`` (a callable like the script's) answers, else
    HTTP 500. Every request body is kept in ``requests``; a GET (what a followed redirect sends)
    is kept there too, as ``{"method": "GET", "path", "auth"}``, and answered like a POST."""

    def __init__(self, responder: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.script: list[Reply] = []
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                server.requests.append({"method": "GET", "path": self.path, "auth": self.headers.get("Authorization")})
                self._answer({"model": "none"})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                self._answer(body)

            def _answer(self, body: dict[str, Any]) -> None:
                reply = server.script.pop(0) if server.script else server.responder or {"status": 500}
                if callable(reply):
                    reply = reply(body)
                if isinstance(reply, str):
                    reply = {"content": reply}
                time.sleep(reply.get("sleep", 0))
                status = reply.get("status", 200)
                if "raw" in reply:
                    data = reply["raw"]
                elif status != 200:
                    data = json.dumps({"error": {"message": f"scripted {status}"}}).encode()
                else:
                    data = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"], "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": reply.get("content", "{}")},
                         "finish_reason": "stop"}]}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in reply.get("headers", {}).items():
                        self.send_header(name, value)
                    if "stream" not in reply:
                        self.send_header("Content-Length", str(reply.get("length", len(data))))
                    self.end_headers()
                    if "stream" in reply:
                        until = time.monotonic() + 60
                        while time.monotonic() < until:
                            self.wfile.write(reply["stream"])
                    elif "drip" in reply:
                        for i in range(10):
                            self.wfile.write(data[i * len(data) // 10:(i + 1) * len(data) // 10])
                            self.wfile.flush()
                            time.sleep(reply["drip"])
                    else:
                        self.wfile.write(data)
                except OSError:
                    pass  # the client gave up

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def client(self, timeout: float = 5.0, **kw: Any) -> ChatClient:
        return ChatClient("scripted", base_url=self.url, timeout=timeout, api_key="", **kw)
