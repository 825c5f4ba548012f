"""What every OpenAI-compatible chat endpoint of ours shares: a localhost HTTP server on its own thread
(``with Endpoint(...) as e: e.api_base``), ``GET /v1/models``, ``POST /v1/chat/completions`` and the
chat-completion envelope. A subclass answers one request in :meth:`ChatEndpoint.answer`; an
:class:`EndpointError` there becomes an OpenAI-style error reply (vLLM's 400 for a prompt over the context).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class EndpointError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class ChatEndpoint:
    """A chat-completions endpoint at http://127.0.0.1:<free port>/v1; ``calls`` counts the completions asked
    for, and with ``log_path`` each one's outcome (:meth:`record`) is appended there as a JSON line."""

    def __init__(self, name: str, log_path: str | Path | None = None):
        self.name, self.calls = name, 0
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # litellm retries and polls; keep stderr for real errors
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": endpoint.name, "object": "model"}]})

            def do_POST(self) -> None:
                try:
                    req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    with endpoint._lock:
                        endpoint.calls += 1
                    self._send(200, endpoint.answer(req))
                except EndpointError as e:
                    endpoint.record({"error": str(e), "code": e.code})
                    self._send(
                        e.code, {"object": "error", "message": str(e), "type": "BadRequestError", "code": e.code}
                    )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        """The response body for one chat-completion request (a subclass builds it with :meth:`envelope`)."""
        raise NotImplementedError

    def envelope(
        self, message: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int, **extra: Any
    ) -> dict[str, Any]:
        """An OpenAI chat.completion body around one assistant MESSAGE."""
        return {
            "id": f"chatcmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            **extra,
        }

    def record(self, entry: dict[str, Any]) -> None:
        if self.log_path is not None:
            with self._lock, self.log_path.open("a") as f:
                f.write(json.dumps(entry) + "\n")

    def __enter__(self) -> ChatEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
