"""A headless Chromium driven over the DevTools protocol (aiohttp's websocket, no new dependency): what MLflow's
UI shows a researcher, read from the page itself. Used by bench_scale.py (how long the runs page takes) and by
tests/test_what_users_see.py (what a chart plots)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def watch(url: str, expression: str, done, profile: Path, port: int, timeout_s: float = 60.0):
    """Open `url` and evaluate `expression` (JavaScript) every 0.1 s until `done(value)`: (value, seconds from
    the navigation), or (the last value, None) at the timeout."""
    import aiohttp

    browser = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                                "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def drive():
        deadline = time.time() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
                    tab = next(t for t in json.load(answer) if t["type"] == "page")
                break
            except (OSError, StopIteration):
                if time.time() > deadline:
                    raise TimeoutError("Chromium's DevTools never answered") from None
                await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as session, session.ws_connect(tab["webSocketDebuggerUrl"],
                                                                          max_msg_size=0) as ws:
            ids = iter(range(1, 10**9))

            async def call(method, **params):
                n = next(ids)
                await ws.send_json({"id": n, "method": method, "params": params})
                while (msg := await ws.receive_json()).get("id") != n:
                    pass
                return msg["result"]

            t0 = time.perf_counter()
            await call("Page.navigate", url=url)
            value = None
            while time.time() < deadline:
                value = (await call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get(
                    "value")
                if done(value):
                    return value, time.perf_counter() - t0
                await asyncio.sleep(0.1)
            return value, None

    try:
        return asyncio.run(drive())
    finally:
        browser.terminate()
        browser.wait(timeout=30)
