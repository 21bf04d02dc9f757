"""Serve the keyboard page: this folder at ``/`` and a folder of models at ``/models/``.

    python examples/keyboard_web/serve.py MODELS_DIR [--port 8000]

then open http://127.0.0.1:8000/ (``models/models.json`` is the default manifest; see
manifest.py). onnxruntime-web's ``.wasm`` files go out as ``application/wasm`` and ES modules as
``text/javascript``, as browsers require. Python's http.server, for a local demo only.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent

TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".onnx": "application/octet-stream",
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}


class Handler(SimpleHTTPRequestHandler):
    """Static files; ``/models/...`` from the models folder."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def __init__(self, *args, models: Path, **kwargs) -> None:
        self.models = models
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        if path == "/models" or path.startswith(("/models/", "/models?")):
            root, self.directory = self.directory, str(self.models)
            try:
                return super().translate_path(path[len("/models") :] or "/")
            finally:
                self.directory = root
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        # cross-origin isolation: performance.now() at its finest resolution (5 us, not 100 us)
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base's name)
        pass


def start_server(
    models: Path, host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, str]:
    """A server in a daemon thread (port 0: any free one); returns it and its base URL."""
    handler = partial(Handler, directory=str(HERE), models=Path(models).resolve())
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", type=Path, help="folder with models.json and the exports")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if not (args.models / "models.json").is_file():
        parser.error(f"{args.models}/models.json not found (write it with manifest.py)")
    handler = partial(Handler, directory=str(HERE), models=args.models.resolve())
    server = ThreadingHTTPServer((args.host, args.port), handler)
    print(
        f"serving the keyboard page at http://{args.host}:{server.server_address[1]}/ "
        "(Ctrl-C stops)",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
