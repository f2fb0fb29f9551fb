"""A writer that keeps appending while an attack runs, and the check that
every append the server acknowledged is still there afterwards: an attack
that stalls or crashes the server must not cost a client what it was told
was committed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx


@dataclass
class Writer:
    """Appends ``w<n>`` to ``transcript_id`` over HTTP, one at a time, on a
    thread of its own; ``acked`` holds what was answered 201."""

    url: str
    transcript_id: str
    headers: dict[str, str] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                content = f"w{n}"
                try:
                    answer = client.post(
                        f"/v1/transcripts/{self.transcript_id}/messages",
                        json={"messages": [{"role": "user", "content": content}]},
                    )
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    return
                if answer.status_code == 201:
                    self.acked.append(content)
                else:
                    self.failures.append(f"{answer.status_code} {answer.text[:200]}")
                self._stop.wait(0.02)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(90)

    def assert_nothing_lost(self, *, minimum: int = 1) -> None:
        """Every acknowledged append is in the transcript, in order, once."""
        assert not self.failures, self.failures
        assert len(self.acked) >= minimum, f"only {len(self.acked)} appends acknowledged"
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as client:
            answer = client.get(f"/v1/transcripts/{self.transcript_id}")
        assert answer.status_code == 200, answer.text
        contents = [m["content"] for m in answer.json()["messages"]]
        written = [c for c in contents if c.startswith("w") and c[1:].isdigit()]
        assert written == self.acked


@contextmanager
def writing(
    url: str, transcript_id: str, headers: dict[str, str] | None = None
) -> Iterator[Writer]:
    """Create ``transcript_id`` and append to it throughout the block."""
    with httpx.Client(base_url=url, headers=headers or {}, timeout=60) as client:
        created = client.post("/v1/transcripts", json={"id": transcript_id})
        assert created.status_code == 201, created.text
    writer = Writer(url, transcript_id, dict(headers or {}))
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()
