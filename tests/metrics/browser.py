"""Headless Chromium driven over the DevTools protocol: open a page, wait for it to load and its plots to draw, and
report what the browser itself saw (console errors, uncaught exceptions, failed loads) independent of the page's code.

websocket-client (a dev dependency) speaks the protocol's websocket; nothing else is needed beyond /usr/bin/chromium.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time
import urllib.request

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def chromium() -> str | None:
    return shutil.which("chromium")


# No network: every request that is not a file goes to a closed port or fails to resolve.
OFFLINE = ("--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND")


class Browser:
    """One headless chromium with a fresh profile; ``open(url)`` returns what happened on the page."""

    def __init__(self, profile: pathlib.Path, width: int = 1280, height: int = 1600, flags: tuple[str, ...] = ()):
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([chromium(), *FLAGS, *flags, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        import websocket

        self.ws = websocket.create_connection(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"],
                                              timeout=30, suppress_origin=True)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params) -> dict:
        """Send one command and wait for its answer; events that arrive meanwhile go to ``self.events``."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str, ready: str, timeout: float = 60) -> dict:
        """Navigate, wait until the JS expression ``ready`` is true, and return the errors the browser reported."""
        self.events = []
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"document.readyState === 'complete' && ({ready})"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.evaluate("0")  # drain what arrived while waiting
        errors = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                errors.append(p["exceptionDetails"].get("exception", {}).get("description") or p["exceptionDetails"]["text"])
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e.get("method") == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(p["entry"]["text"])
            elif e.get("method") == "Network.loadingFailed":
                errors.append(f"load failed: {p.get('errorText')}")
        return {"errors": errors, "ready": bool(self.evaluate(ready))}

    def screenshot(self, path: pathlib.Path, width: int, height: int) -> None:
        import base64

        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
