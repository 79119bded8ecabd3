"""LangGraph's long-term memory store on pymem: ``PymemStore``, a ``BaseStore``.

    from pymem.integrations.langgraph import PymemStore
    store = PymemStore(embedder=pymem.HashEmbedder())      # or index={"dims": ..., "embed": ...}
    graph = builder.compile(store=store)

Mapping: one LangGraph store is one pymem keyed store (``store_key``, default ``"langgraph"``,
in ``project_id``); each item is a JSON entry of it, at a path made of its namespace's labels
and its key (docs/integrations.md; sql/api/stores_items.sql). Keyed stores rather than
facts: an item is a value under a key that a put overwrites and a delete removes, which is what
a keyed store's entry is (with its sha, audit log and optional versions), while a fact is a
text identified by its content. Namespaces, filters, listing and ranking are SQL
(``store_items_search``, ``store_namespaces``); Python embeds and converts.

Search with ``query`` ranks by the best cosine similarity of the query's vector to the item's
field vectors (``pymem.store_vectors``), computed by the embedder: a pymem embedder
(``embedder=``, as ``pymem.Memory`` takes it) or LangGraph's ``index`` config (``dims``,
``embed``: a pymem embedder, a LangChain ``Embeddings`` or a function, ``fields``).

Batches behave like LangGraph's ``InMemoryStore``: the reads of a batch see the store as it was
before the batch, then its writes apply (the last write of a key wins), so identical reads run
once and a replaced put is not sent. The async calls of one turn of the event loop run as one
batch (``abatch``), as LangGraph's ``AsyncBatchedBaseStore`` does.

TTL (``supports_ttl = True``), as LangGraph defines it: ``put(..., ttl=minutes)`` makes the item
expire that many minutes after its last write or read; ``ttl=None`` (or no ttl and no
``default_ttl``) makes it non-expiring, since a put replaces the item. A get or a search that
returns an item written with a ttl moves its expiry on by that ttl (``store_items_refresh``),
unless ``refresh_ttl=False`` or the store's ``ttl={"refresh_on_read": False}`` says otherwise;
``ttl={"default_ttl": minutes}`` is the ttl of a put that gives none. An expired item is gone for
every read at once (LangGraph's ``omit_expired``, always on); ``pymem purge`` deletes it later
(docs/sql.md "Expire and purge"): ``sweep_interval_minutes`` is accepted and ignored, as pymem
runs no sweeper of its own, and ``start_ttl_sweeper`` / ``stop_ttl_sweeper`` (``PostgresStore``'s)
do nothing: called or awaited, as either of LangGraph's Postgres stores is.

``index=`` takes LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``) and, from
``PostgresIndexConfig``, ``distance_type="cosine"`` (what pymem ranks by); another distance,
an ``ann_index_config`` (pymem chooses its own indexes) or an unknown key is refused
(``pymem.ValidationError``), rather than accepted and ignored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Generator
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from ..database import AsyncDatabase, Database
from ..errors import ValidationError
from ..runner import Embed, Operation, arun, run
from ..values import expiry
from .. import calls

if TYPE_CHECKING:
    from langgraph.store.base import TTLConfig

try:  # langgraph >= 1.1 checks labels of ops that reach batch() directly
    from langgraph.store.base import validate_op_namespace as _validate_op
except ImportError:  # pragma: no cover - older langgraph: BaseStore's methods check them
    def _validate_op(op: Op) -> None:
        return None

__all__ = ["PymemStore"]


class _Embeddings:
    """A LangChain ``Embeddings`` (or a function LangGraph's ``ensure_embeddings`` wraps) as a
    pymem embedder: ``name`` (stored with every vector), ``dimension``, ``embed``. ``query``
    selects ``embed_query`` (models that embed queries and documents differently)."""

    def __init__(self, embeddings: Any, dimension: int, name: str, query: bool = False) -> None:
        self.embeddings, self.dimension, self.name, self.query = embeddings, dimension, name, query

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.query:
            return [self.embeddings.embed_query(t) for t in texts]
        return self.embeddings.embed_documents(texts)

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        if self.query:
            return list(await asyncio.gather(*(self.embeddings.aembed_query(t) for t in texts)))
        return await self.embeddings.aembed_documents(texts)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"an item's value must be JSON (no NaN or infinity): {exc}") from None


def _minutes(ttl: Any) -> float | None:
    """A LangGraph ttl (minutes) as seconds, for pymem's ``ttl`` (None: no expiry)."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise ValidationError(f"ttl must be a number of minutes, not {type(ttl).__name__}")
    return ttl * 60


_INDEX_KEYS = ("dims", "embed", "fields", "distance_type")


def _check_index(index: Any) -> None:
    """Refuse what PymemStore would otherwise accept and ignore (issue 56): one line each."""
    if not isinstance(index, dict):
        raise ValidationError(f"index must be an IndexConfig (a dict), not {type(index).__name__}")
    if index.get("ann_index_config") is not None:
        raise ValidationError("index: ann_index_config is not supported: pymem chooses the indexes of its store "
                              "vectors itself; leave it out")
    if index.get("distance_type", "cosine") not in (None, "cosine"):
        raise ValidationError(f"index: distance_type={index['distance_type']!r} is not supported: PymemStore ranks "
                              "by cosine similarity; leave it out or pass \"cosine\"")
    unknown = sorted(set(index) - {*_INDEX_KEYS, "ann_index_config"})
    if unknown:
        raise ValidationError(f"index: unknown keys {unknown}; PymemStore takes {list(_INDEX_KEYS)}")


def _read_key(op: Op) -> Any:
    """What makes two reads of one batch the same read (None: never merged). Namespaces may
    come as lists (``search(["docs"])``): compared as tuples."""
    try:
        if isinstance(op, GetOp):
            key: Any = ("get", tuple(op.namespace), op.key, getattr(op, "refresh_ttl", True))
        elif isinstance(op, SearchOp):
            try:
                where = json.dumps(op.filter, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):
                return None  # _search refuses it, for this caller
            key = ("search", tuple(op.namespace_prefix), where, op.limit, op.offset, op.query,
                   getattr(op, "refresh_ttl", True))
        elif isinstance(op, ListNamespacesOp):
            key = ("namespaces", tuple((c.match_type, tuple(c.path)) for c in op.match_conditions or ()),
                   op.max_depth, op.limit, op.offset)
        else:
            return None
        hash(key)
    except TypeError:
        return None
    return key


def _settle(waiter: asyncio.Future[Any], result: Any = None, *, error: BaseException | None = None) -> None:
    """Hand a caller its result or error (unless it stopped waiting: cancelled)."""
    if waiter.done():
        return
    if error is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(result)


class _NoSweeper(concurrent.futures.Future[None]):
    """What ``start_ttl_sweeper`` returns: a sweeper already done (pymem runs none; module
    docstring). A ``concurrent.futures.Future`` as ``PostgresStore``'s, and awaitable, as
    ``AsyncPostgresStore``'s task is."""

    def __init__(self) -> None:
        super().__init__()
        self.set_result(None)

    def __await__(self) -> Generator[Any, None, None]:
        return None
        yield  # a generator: awaiting it returns at once


class _Stopped(int):
    """What ``stop_ttl_sweeper`` returns: true (``PostgresStore``'s bool), and awaitable to true
    (``AsyncPostgresStore``'s coroutine)."""

    def __new__(cls) -> _Stopped:
        return super().__new__(cls, 1)

    def __repr__(self) -> str:
        return "True"

    def __await__(self) -> Generator[Any, None, bool]:
        return True
        yield  # a generator: awaiting it returns at once


class _SyncCallInLoop(ValidationError, asyncio.InvalidStateError):
    """A sync call on a PymemStore over an AsyncDatabase from its own event loop's thread (it
    would block the loop it waits for): a ``pymem.ValidationError`` and, as
    ``AsyncPostgresStore`` raises, an ``asyncio.InvalidStateError``."""


class PymemStore(BaseStore):
    """A LangGraph store kept in pymem (module docstring). ``db``: a ``pymem.Database`` (sync
    calls; async calls run them in a worker thread) or a ``pymem.AsyncDatabase`` (async calls
    only), left open for its owner; none: the store opens its own ``Database`` from the
    settings (``PYMEM_DSN``, or the embedded server) and ``close()`` closes it. ``project_id``:
    the pymem project (default: the settings' ``PYMEM_PROJECT_ID``). ``embedder`` or ``index``
    enable search by meaning; without either, ``query`` is ignored, as LangGraph's stores do.
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``; see the
    module docstring)."""

    supports_ttl = True

    def __init__(self, db: Database | AsyncDatabase | None = None, *, project_id: str | None = None,
                 store_key: str = "langgraph", embedder: Any = None, index: dict[str, Any] | None = None,
                 actor: str | None = "langgraph", ttl: dict[str, Any] | None = None) -> None:
        if embedder is not None and index is not None:
            raise ValidationError("pass embedder= or index=, not both")
        if index is not None:
            _check_index(index)
        if ttl is not None:
            if not isinstance(ttl, dict):
                raise ValidationError(f"ttl must be a TTLConfig (a dict), not {type(ttl).__name__}")
            _minutes(ttl.get("default_ttl"))  # checked here rather than at the first put
        # read by BaseStore's get, search and put (a TypedDict: a plain dict of its keys)
        self.ttl_config = cast("TTLConfig | None", dict(ttl) if ttl is not None else None)
        self._own_db = db is None
        self.db = db if db is not None else Database()
        self.project_id = project_id if project_id is not None else self.db.settings.project_id
        self.store_key = store_key
        self.actor = actor
        self._opened = False
        # abatch's queue: the calls of one turn of the event loop, run as one batch by _drain
        self._queue: list[tuple[list[Op], asyncio.Future[list[Result]]]] = []
        self._queue_loop: asyncio.AbstractEventLoop | None = None
        self._drainer: asyncio.Task[None] | None = None
        # the event loop an AsyncDatabase serves (sync calls from other threads run there)
        self._loop: asyncio.AbstractEventLoop | None = None
        if isinstance(self.db, AsyncDatabase):
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
        self.index_config: dict[str, Any] | None = None
        self._embedder: Any = None
        self._query_embedder: Any = None
        if embedder is not None:
            index = {"embed": embedder, "dims": embedder.dimension}
        if index is not None:
            self.index_config = dict(index)
            embed = index.get("embed")
            if hasattr(embed, "name") and hasattr(embed, "dimension") and hasattr(embed, "embed"):
                self._embedder = self._query_embedder = embed  # a pymem embedder
            else:
                wrapped = ensure_embeddings(embed)
                model = getattr(embed, "model", None) or getattr(embed, "model_name", None) or ""
                kind = embed if isinstance(embed, str) else f"{type(embed).__module__}.{type(embed).__qualname__}"
                name = f"langgraph:{kind}{':' + str(model) if model and not isinstance(embed, str) else ''}"[:200]
                dims = index.get("dims")
                if not isinstance(dims, int) or isinstance(dims, bool):
                    raise ValidationError("index= needs dims, the embedding model's dimension (an int)")
                self._embedder = _Embeddings(wrapped, dims, name)
                self._query_embedder = _Embeddings(wrapped, dims, name, query=True)
            fields = index.get("fields") or ["$"]
            self._fields = [(f, f if f == "$" else tokenize_path(f)) for f in fields]

    # -- operations: each op is one generator of pymem steps, run sync or async -------------
    def _open(self) -> Operation[None]:
        yield calls.store_open(store_key=self.store_key, project_id=self.project_id, audit=None, keep_versions=None,
                               read_only_prefixes=None, create=True)

    def _refresh(self, items: list[tuple[tuple[str, ...], str]]) -> Operation[None]:
        """Move on the expiry of these items (those that expire; the SQL leaves the ones written
        without a ttl alone)."""
        if items:
            yield calls.store_items_refresh(store_key=self.store_key, project_id=self.project_id, items=_json(
                [{"namespace": list(namespace), "key": key} for namespace, key in items]))

    def _get(self, op: GetOp) -> Operation[Item | None]:
        rows = yield calls.store_item_get(store_key=self.store_key, project_id=self.project_id,
                                          namespace=list(op.namespace), key=op.key)
        if not rows:
            return None
        r = rows[0]
        if r["expires_at"] is not None and getattr(op, "refresh_ttl", True):
            yield from self._refresh([(op.namespace, op.key)])
        return Item(value=r["value"], key=op.key, namespace=op.namespace, created_at=r["created_at"],
                    updated_at=r["updated_at"])

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(field, text) pairs to embed for a put, the way LangGraph's InMemoryStore picks them."""
        if self._embedder is None or op.index is False or op.value is None:
            return []
        paths = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        out: list[tuple[str, str]] = []
        for path, field in paths:
            # an empty text gets no vector (its embedding would be zero, which pymem refuses)
            texts = [t for t in get_text_at_path(op.value, field) if t.strip()]
            if len(texts) > 1:
                out.extend((f"{path}.{i}", t) for i, t in enumerate(texts))
            elif texts:
                out.append((path, texts[0]))
        return out

    def _put(self, op: PutOp) -> Operation[None]:
        ttl = _minutes(getattr(op, "ttl", None))
        if op.value is None:
            yield calls.store_item_delete(store_key=self.store_key, project_id=self.project_id,
                                          namespace=list(op.namespace), key=op.key, actor=self.actor)
            return None
        pairs = self._texts(op)
        vectors = (yield Embed([t for _, t in pairs])) if pairs else []
        ex = expiry(ttl, None)
        yield calls.store_item_put(store_key=self.store_key, project_id=self.project_id, namespace=list(op.namespace),
                                   key=op.key, value=_json(op.value), actor=self.actor,
                                   embedder=self._embedder.name if vectors else None,
                                   fields=[f for f, _ in pairs] or None, embeddings=vectors or None, ttl=ex.ttl,
                                   expires_at=ex.expires_at)
        return None

    def _search(self, op: SearchOp) -> Operation[list[SearchItem]]:
        query = None
        if op.query and self._query_embedder is not None:
            query = (yield Embed([op.query], query=True))[0]
        rows = yield calls.store_items_search(
            store_key=self.store_key, project_id=self.project_id, namespace_prefix=list(op.namespace_prefix), filter=_json(op.filter or {}),
            query_vector=query, embedder=self._query_embedder.name if query is not None else None,
            max_items=op.limit, skip=op.offset)
        if getattr(op, "refresh_ttl", True):
            yield from self._refresh([(tuple(r["namespace"]), r["key"]) for r in rows if r["expires_at"] is not None])
        return [SearchItem(namespace=tuple(r["namespace"]), key=r["key"], value=r["value"],
                           created_at=r["created_at"], updated_at=r["updated_at"], score=r["score"])
                for r in rows]

    def _list_namespaces(self, op: ListNamespacesOp) -> Operation[list[tuple[str, ...]]]:
        # several conditions of one kind (possible in a hand-built op) hold together: merge them
        # label by label ('*' yields to a label; two different labels match nothing)
        merged: dict[str, list[str]] = {"prefix": [], "suffix": []}
        for cond in op.match_conditions or ():
            have = merged[cond.match_type]
            path = list(cond.path)
            if cond.match_type == "suffix":
                have.reverse()
                path.reverse()
            for i, label in enumerate(path):
                if i == len(have):
                    have.append(label)
                elif have[i] == "*":
                    have[i] = label
                elif label not in ("*", have[i]):
                    return []
            if cond.match_type == "suffix":
                have.reverse()
        rows = yield calls.store_namespaces(store_key=self.store_key, project_id=self.project_id,
                                            prefix=merged["prefix"], suffix=merged["suffix"], max_depth=op.max_depth,
                                            max_items=op.limit, skip=op.offset)
        return [tuple(r["namespace"]) for r in rows]

    def _get_many(self, ops: list[GetOp]) -> Operation[list[Item | None]]:
        """Several gets in one statement (``store_items_get``), then one refresh of those that
        expire and asked for it."""
        rows = yield calls.store_items_get(store_key=self.store_key, project_id=self.project_id, items=_json(
            [{"namespace": list(op.namespace), "key": op.key} for op in ops]))
        found: list[Item | None] = [None] * len(ops)
        refresh: list[tuple[tuple[str, ...], str]] = []
        for r in rows:
            op = ops[r["position"]]
            found[r["position"]] = Item(value=r["value"], key=op.key, namespace=tuple(op.namespace),
                                        created_at=r["created_at"], updated_at=r["updated_at"])
            if r["expires_at"] is not None and getattr(op, "refresh_ttl", True):
                refresh.append((tuple(op.namespace), op.key))
        yield from self._refresh(refresh)
        return found

    def _delete_many(self, ops: list[PutOp]) -> Operation[None]:
        """Several deletes in one statement (``store_items_delete``)."""
        yield calls.store_items_delete(store_key=self.store_key, project_id=self.project_id, actor=self.actor,
                                       items=_json([{"namespace": list(op.namespace), "key": op.key} for op in ops]))
        return None

    def _put_many(self, ops: list[PutOp]) -> Operation[None]:
        """Several puts of items without vectors in one statement (``store_items_put``)."""
        yield calls.store_items_put(store_key=self.store_key, project_id=self.project_id, actor=self.actor,
                                    items="[" + ",".join(
                                        '{"namespace": %s, "key": %s, "value": %s, "ttl_seconds": %s}' % (
                                            _json(list(op.namespace)), _json(op.key), _json(op.value),
                                            _json(_minutes(getattr(op, "ttl", None))))
                                        for op in ops) + "]")
        return None

    def _plan(self, ops: Iterable[Op]) -> list[tuple[list[list[int]] | list[int], Operation[Any], Any]]:
        """The batch as (result indexes, operation, embedder): the reads in order, each distinct
        read once (they all see the store as it was before the batch, so identical reads give
        one result), then the last put of each (namespace, key), which no result waits for. The
        gets of more than one key are one operation (one statement) whose result is a list, one
        per distinct get: its indexes are then a list of lists; so are the deletes."""
        reads: dict[Any, tuple[list[int], Operation[Any], Any]] = {}
        gets: dict[Any, tuple[list[int], GetOp]] = {}
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            _validate_op(op)
            if isinstance(op, PutOp):
                puts.pop((tuple(op.namespace), op.key), None)  # a later put moves to the end
                puts[(tuple(op.namespace), op.key)] = op
                continue
            key = _read_key(op)
            if isinstance(op, GetOp) and key is not None:
                gets.setdefault(key, ([], op))[0].append(i)
            elif key is not None and key in reads:
                reads[key][0].append(i)
            elif isinstance(op, GetOp):
                reads[i] = ([i], self._get(op), None)
            elif isinstance(op, SearchOp):
                reads[key if key is not None else i] = ([i], self._search(op), self._query_embedder)
            elif isinstance(op, ListNamespacesOp):
                reads[key if key is not None else i] = ([i], self._list_namespaces(op), None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        plan: list[tuple[Any, Operation[Any], Any]] = []
        if len(gets) == 1:
            (indexes, op), = gets.values()
            plan.append((indexes, self._get(op), None))
        elif gets:
            plan.append(([ix for ix, _ in gets.values()], self._get_many([op for _, op in gets.values()]), None))
        plan += list(reads.values())
        deletes = [op for op in puts.values() if op.value is None]
        if len(deletes) > 1:
            plan.append(([], self._delete_many(deletes), None))
        writes = [op for op in puts.values() if op.value is not None or len(deletes) == 1]
        plain = [op for op in writes if op.value is not None and not self._texts(op)]
        if len(plain) > 1:
            plan.append(([], self._put_many(plain), None))
            writes = [op for op in writes if op.value is None or self._texts(op)]
        plan += [([], self._put(op), self._embedder) for op in writes]
        return plan

    @staticmethod
    def _assign(results: list[Result], indexes: Any, result: Any) -> None:
        if indexes and isinstance(indexes[0], list):  # one result per distinct read
            for ix, one in zip(indexes, result):
                for i in ix:
                    results[i] = one
        else:
            for i in indexes:
                results[i] = result

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if isinstance(self.db, AsyncDatabase):
            return self._batch_on_loop(list(ops))
        ops = list(ops)
        if not self._opened:
            run(self._open(), self.db, owner=self)
            self._opened = True
        results: list[Result] = [None] * len(ops)
        for indexes, operation, embedder in self._plan(ops):
            self._assign(results, indexes, run(operation, self.db, embedder, owner=self))
        return results

    def _batch_on_loop(self, ops: list[Op]) -> list[Result]:
        """A sync call on a store over an AsyncDatabase: from another thread, the batch runs on
        the database's event loop (joining that turn's batch) and this thread waits for it, as
        ``AsyncPostgresStore`` does; from the loop's own thread it would block the loop: refused."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is loop:
            raise _SyncCallInLoop("a sync call (get, put, ...) on a PymemStore over an AsyncDatabase, in its event "
                                  "loop, would block it: use aget, aput, ... or call from another thread")
        if loop is None or loop.is_closed() or not loop.is_running():
            raise ValidationError("this PymemStore has an AsyncDatabase: use its async methods (aget, aput, ...), "
                                  "or call the sync ones from another thread while its event loop runs")
        for op in ops:
            _validate_op(op)
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The async calls that reach it in one turn of the event loop (``aget``, ``aput``, ...
        from many tasks) run as one batch, as LangGraph's ``AsyncBatchedBaseStore`` does: its
        identical reads once, its puts of a key the last one only. A batch that fails runs again
        caller by caller, so an error reaches only the caller whose operation raised it."""
        ops = list(ops)
        for op in ops:  # an invalid operation fails its own caller, before it joins a batch
            _validate_op(op)
        loop = asyncio.get_running_loop()
        if isinstance(self.db, AsyncDatabase):
            self._loop = loop
        if self._queue_loop is not loop:
            if self._drainer is not None and not self._drainer.done():  # another loop's batch is running
                return await self._abatch_now(ops)
            self._queue_loop, self._queue = loop, []
        waiter: asyncio.Future[list[Result]] = loop.create_future()
        self._queue.append((ops, waiter))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await waiter

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # the calls made in this turn of the loop join the batch
        try:
            while self._queue:
                taken, self._queue = self._queue, []
                try:
                    results = await self._abatch_now([op for ops, _ in taken for op in ops])
                except Exception as exc:
                    if len(taken) == 1:
                        _settle(taken[0][1], error=exc)
                        continue
                    for ops, waiter in taken:  # again, alone: the error reaches its own caller only
                        try:
                            _settle(waiter, await self._abatch_now(ops))
                        except Exception as own:
                            _settle(waiter, error=own)
                    continue
                at = 0
                for ops, waiter in taken:
                    _settle(waiter, results[at:at + len(ops)])
                    at += len(ops)
        finally:  # cancelled with its loop: no caller waits forever
            for _, waiter in self._queue:
                waiter.cancel()
            self._queue = []

    async def _abatch_now(self, ops: list[Op]) -> list[Result]:
        if not isinstance(self.db, AsyncDatabase):
            return await asyncio.to_thread(self.batch, ops)
        if not self._opened:
            await arun(self._open(), self.db, owner=self)
            self._opened = True
        results: list[Result] = [None] * len(ops)
        plan = self._plan(ops)
        # the reads at once, then the puts at once (each of another key), as many at a time as
        # the pool has connections: the reads see the store as it was before the batch
        limit = asyncio.Semaphore(max(1, self.db.settings.pool_max_size))

        async def one(operation: Operation[Any], embedder: Any) -> Any:
            async with limit:
                return await arun(operation, self.db, embedder, owner=self)  # type: ignore[arg-type]

        reads = [step for step in plan if step[0]]
        for (indexes, _, _), result in zip(reads, await asyncio.gather(*(one(o, e) for _, o, e in reads))):
            self._assign(results, indexes, result)
        await asyncio.gather(*(one(o, e) for indexes, o, e in plan if not indexes))
        return results

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> _NoSweeper:
        """Does nothing (``PostgresStore``'s API, for code that calls it): an expired item is
        hidden from every read when it expires, and ``pymem purge`` deletes it later. Returns a
        future already done, which may also be awaited."""
        return _NoSweeper()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> _Stopped:
        """Does nothing (see `start_ttl_sweeper`); true, and awaitable to true."""
        return _Stopped()

    def close(self) -> None:
        """Close the Database this store opened itself (one passed as ``db=`` stays open)."""
        if self._own_db and isinstance(self.db, Database):
            self.db.close()

    def __enter__(self) -> PymemStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
