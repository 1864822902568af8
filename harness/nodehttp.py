"""JSON over HTTP to a node, keeping why there is no answer to use.

`http_answer` is one request: the answer's object, or the reason there is
none in words a run's error can carry (a refusal in the node's own words, a
timeout, a closed port, something that is not a JSON object). `http_json` is
its object alone, for callers to whom any failure means "no answer".
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import msgspec


class Answer(msgspec.Struct, frozen=True):
    """One JSON request's outcome: the answer's object, or why there is none
    (a refusal with the node's own words, a timeout, a closed port)."""

    doc: dict[str, Any] | None
    problem: str = ""


NOT_JSON = Answer(None, "answered with something that is not JSON")


def refused(status: int, text: bytes) -> Answer:
    """An error answer in words: ember's `{"error", "message"}`, else its text."""
    try:
        doc = msgspec.json.decode(text)
    except msgspec.DecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return Answer(None, f"refused ({status} {doc.get('error', '')}): {doc['message']}")
    body = text.decode("utf-8", "replace").strip()[:200]
    return Answer(None, f"refused ({status}){': ' + body if body else ''}")


def no_answer(timeout_s: float) -> Answer:
    """Nothing came back in time."""
    return Answer(None, f"no answer within {timeout_s:g} s")


def decoded(doc: Any) -> Answer:
    """A decoded answer: its object, or why it is not one."""
    if not isinstance(doc, dict):
        return Answer(None, "answered with JSON that is not an object")
    return Answer(doc)


def http_answer(url: str, method: str = "GET", body: Any = None, timeout_s: float = 2.0) -> Answer:
    """A JSON request, keeping the reason when there is no answer to use."""
    data = msgspec.json.encode(body) if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            doc = msgspec.json.decode(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return refused(err.code, err.read())
    except TimeoutError:
        return no_answer(timeout_s)
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            return no_answer(timeout_s)
        return Answer(None, f"unreachable ({err.reason})")
    except OSError as err:
        return Answer(None, f"unreachable ({err})")
    except msgspec.DecodeError:
        return NOT_JSON
    return decoded(doc)


def http_json(
    url: str, method: str = "GET", body: Any = None, timeout_s: float = 2.0
) -> dict[str, Any] | None:
    """A JSON request; None when the node does not answer or answers an error."""
    return http_answer(url, method, body, timeout_s).doc
