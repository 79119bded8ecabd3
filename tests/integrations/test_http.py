"""pymem.http, the one HTTP client of the chat learner (pymem.llm.ChatClient) and the
embeddings adapter (pymem.embedders.OpenAIEmbedder), against real servers on the loopback
interface (tests/chat_server.py): an API key never follows a redirect (issue 36, item 2), and a
reply is read up to a size limit, never whole (item 3). No network, no model."""

from __future__ import annotations

import json
import time

import pytest
from chat_server import ChatServer

import pymem
from pymem.embedders import HashEmbedder, OpenAIEmbedder
from pymem.http import origin
from pymem.llm import MAX_REPLY_BYTES, ChatClient

KEY = "sk-secret-key-1234"
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture
def servers():
    """The endpoint, and another host's server it may redirect to."""
    endpoint, other = ChatServer(), ChatServer()
    other.responder = lambda body: '{"facts": ["the other host answered"]}'
    yield endpoint, other
    for s in (endpoint, other):
        s.httpd.shutdown()
        s.httpd.server_close()


def origin_of(server: ChatServer) -> str:
    return server.url.removesuffix("/v1")


def embeddings(texts: list[str], dimension: int = 4) -> bytes:
    vectors = HashEmbedder(dimension).embed(texts)
    return json.dumps({"object": "list", "data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}).encode()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_the_chat_key_never_follows_a_redirect(servers, status):
    endpoint, other = servers
    location = f"{other.url}/chat/completions?token=from-the-location"
    endpoint.script = [{"status": status, "headers": {"Location": location}}]
    client = ChatClient("m", base_url=endpoint.url, api_key=KEY, timeout=5)
    with pytest.raises(pymem.ConfigError, match=rf"HTTP {status}, a redirect to {origin_of(other)}: pymem follows no redirect") as info:
        client.complete(ASK)
    assert KEY not in str(info.value) and "token" not in str(info.value) and "/chat" not in str(info.value).split("redirect to")[1]
    assert other.requests == []  # the other host saw nothing: no key, no messages
    assert [r["auth"] for r in endpoint.requests] == [f"Bearer {KEY}"]


def test_a_relative_redirect_names_the_endpoints_own_origin(servers):
    endpoint, _ = servers
    endpoint.script = [{"status": 302, "headers": {"Location": "/elsewhere"}}, {"status": 302}]
    client = ChatClient("m", base_url=endpoint.url, api_key=KEY, timeout=5)
    with pytest.raises(pymem.ConfigError, match=f"a redirect to {origin_of(endpoint)}:"):
        client.complete(ASK)
    with pytest.raises(pymem.ConfigError, match="a redirect to nowhere"):
        client.complete(ASK)
    assert len(endpoint.requests) == 2  # no GET followed either


def test_a_redirects_origin_keeps_nothing_but_scheme_host_and_port():
    assert origin("https://user:password@models.example:8443/v1/x?token=t#f") == "https://models.example:8443"
    assert origin("http://[::1]/v1") == "http://[::1]"
    assert origin("http://host:notaport/") == "an unparsable URL"


def test_the_embedders_key_never_follows_a_redirect(servers):
    endpoint, other = servers
    other.responder = {"raw": embeddings(["a"])}
    endpoint.script = [{"status": 302, "headers": {"Location": f"{other.url}/embeddings"}}]
    emb = OpenAIEmbedder("toy", base_url=endpoint.url, api_key=KEY, dimension=4, use_openai=False, timeout=5)
    with pytest.raises(pymem.ConfigError, match=f"HTTP 302, a redirect to {origin_of(other)}") as info:
        emb.embed(["a"])
    assert "openai:toy" in str(info.value) and KEY not in str(info.value)
    assert other.requests == []


def test_a_chat_reply_is_read_up_to_its_limit_never_whole(servers):
    endpoint, _ = servers
    assert MAX_REPLY_BYTES == 4 << 20
    client = ChatClient("m", base_url=endpoint.url, timeout=30)
    endpoint.script = ["x" * (MAX_REPLY_BYTES - 1000)]  # just under: read
    assert len(client.complete(ASK)) == MAX_REPLY_BYTES - 1000
    endpoint.script = ["x" * (5 << 20)]  # a 5 MiB completion, Content-Length given: refused before reading
    with pytest.raises(pymem.ValidationError, match=r"answered \d+ bytes; a reply may have at most 4194304"):
        client.complete(ASK)
    # no Content-Length, an endless body: refused at the limit, long before the timeout
    endpoint.script = [{"stream": b" " * 65536}]
    started = time.monotonic()
    with pytest.raises(pymem.ValidationError, match="more than 4194304 bytes"):
        client.complete(ASK)
    assert time.monotonic() - started < 20


def test_an_embeddings_reply_is_bounded_by_what_was_asked(servers):
    endpoint, _ = servers
    emb = OpenAIEmbedder("toy", base_url=endpoint.url, dimension=4, use_openai=False, timeout=30)
    endpoint.script = [{"raw": embeddings(["a", "b"])}]
    assert emb.embed(["a", "b"]) == HashEmbedder(4).embed(["a", "b"])
    endpoint.script = [{"stream": b" " * 65536}]  # 1 MiB + 2 x 4 x 64 bytes allowed
    with pytest.raises(pymem.ValidationError, match=r"openai:toy.*more than 1049088 bytes"):
        emb.embed(["a", "b"])


@pytest.mark.parametrize("reply, error, match", [
    ({"raw": b"<html>not json</html>"}, pymem.ValidationError, "without a data list"),
    ({"raw": b'{"data": 7}'}, pymem.ValidationError, "without a data list"),
    ({"status": 413}, pymem.ValidationError, "HTTP 413: scripted 413"),
    ({"status": 401}, pymem.ConfigError, "HTTP 401"),
    ({"status": 503}, pymem.ConnectionError, "HTTP 503"),
    ({"sleep": 1.5}, pymem.TimeoutError, "longer than 0.3 s"),
])
def test_the_embedder_maps_failures_as_the_chat_client_does(servers, reply, error, match):
    endpoint, _ = servers
    endpoint.script = [reply]
    emb = OpenAIEmbedder("toy", base_url=endpoint.url, dimension=4, use_openai=False, timeout=0.3)
    with pytest.raises(error, match=match) as info:
        emb.embed(["a"])
    assert "openai:toy" in str(info.value)


def test_a_huge_error_body_is_not_read_whole(servers):
    endpoint, _ = servers
    endpoint.script = [{"status": 500, "raw": b"upstream exploded " + b"x" * (64 << 20)}]
    started = time.monotonic()
    with pytest.raises(pymem.ConnectionError, match="HTTP 500: upstream exploded"):
        ChatClient("m", base_url=endpoint.url, timeout=30).complete(ASK)
    assert time.monotonic() - started < 10
