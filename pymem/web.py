"""``pymem serve``: the memory page, a small server-rendered web app over a pymem database.

Standard library only (``wsgiref`` and ``html.escape``): no template engine, no JavaScript, no
build step. Pages: the projects given on the command line (and a form to open any other: row-level
security allows no listing across projects); a project's fact subjects, users and keyed stores
with counts; a subject's facts newest first (source, confidence, time, provenance: a learned
fact links to the turn that taught it, a fact corrected here says "edited on the page"; "Show
superseded" adds the replaced versions, muted, with when each was superseded and a link to the
row that replaced it, saying how: "updated →", "retired →" (a learner's delete), "edited on the
page →", "merged into", or plain "superseded →" (`change_kind`)) and a search box; a
turn's two messages and the facts it taught; a user's threads with window and summary and a
recall search; a store's entries, audit tail and an entry's versions.

Searches rank as Memory.retrieve and Memory.recall do, by the query's vector and its words, with
the project's own embedder: the newest registered one (``browse_embedders``) that pymem ships and
can run here (`builtin_embedder`); with none, by words alone, and the page says why. They
never write: rows with no vector from that embedder are matched by their words and listed apart
as "not yet embedded" (`pymem.browse.search_facts`, `pymem.browse.recall_messages`).

Reads go through the Memory API and the read-only SQL functions, on connections of
``PYMEM_READER_DSN``, a login role that is only a reader (checked at start: no session of it can
become a writer), or without it on the login role's connections that SET ROLE to the reader role
at start (``-c role=...``: the page's code cannot write by mistake, but a session could switch
back; a warning says so; docs/memory-page.md). With ``allow_edit``, forgetting a fact and
superseding it with corrected text go through `pymem.Memory` (``forget`` / ``update``,
the correction's metadata `PAGE_EDIT`) on the login role's own connections, as POST forms
carrying a per-process token (and, when the browser sends one, an Origin that must be this
server), of a declared length of at most `MAX_FORM` bytes (`read_form`). Bound to a
loopback address, it answers only requests whose Host is a loopback name (`is_loopback`;
no DNS rebinding). Every response carries `HEADERS` (``Cache-Control: no-store``, ...); a
client that stalls mid-request for `REQUEST_TIMEOUT` seconds is dropped.
"""

from __future__ import annotations

import errno
import html
import ipaddress
import json
import secrets
import socketserver
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import browse
from .database import Database
from .embedders import E5SmallEmbedder, Embedder, HashEmbedder, OnnxMiniLMEmbedder
from .errors import ConfigError, ConnectionError, Error, MigrationError, NotFoundError, ValidationError
from .memory import Memory
from .learning import status as learning_status
from .runner import fetch
from .settings import Settings
from . import calls

WINDOW = 20  # messages shown per thread
#: The longest POST body the page reads (its forms are a few hundred bytes).
MAX_FORM = 64 * 1024
#: The embedded server's reader login for the page (sql/api/browse.sql, _page_reader_login).
PAGE_READER = "pymem_page"
#: Seconds a client may leave a request half-sent before the server drops it.
REQUEST_TIMEOUT = 30.0
#: On every response: pages show personal data and the edit token, so no cache keeps them
#: (no-store); no framing, no type sniffing, no referrer to other sites (same-origin, not
#: no-referrer: under no-referrer a browser sends "Origin: null" with the edit forms, which
#: the origin check then refuses); nothing loads but this page's own styles and images.
HEADERS = (("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
           ("Referrer-Policy", "same-origin"),
           ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
            "form-action 'self'"))
#: What a page edit writes into the corrected fact's metadata, so the page can say so.
PAGE_EDIT = {"edited_on": "memory page"}
#: The marker of a superseded row, by `change_kind`.
CHANGE_LABEL = {"update": "updated →", "delete": "retired →", "merged": "merged into", "edited": "edited on the page →",
                "superseded": "superseded →"}
#: What a fact's turn did, by the op in its ``metadata["turn"]`` (none: learned or added).
TURN_CHANGE = {None: "learned", "update": "updated a fact", "delete": "retired a fact"}
SCOPE_TIER = {"agent": "agent", "user": "user", "project": "project"}
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:78em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}a{color:#0645ad}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr.superseded td{color:#999;background:#fafafa}tr:target td{background:#fff3b0}
.muted{color:#888}.marker{font-size:.9em}form.inline{display:inline}nav{margin-bottom:1em}
pre{white-space:pre-wrap;background:#f7f7f7;padding:.6em;border:1px solid #ddd}
.warn{background:#fff0f0;border:1px solid #e99;padding:.5em}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def link(route: str, /, **params: Any) -> str:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return f"{route}?{query}" if query else route


def url(route: str, /, **params: Any) -> str:
    """``link`` escaped for an HTML attribute."""
    return esc(link(route, **params))


def when(ts: Any) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S %Z") if ts is not None else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], row_attrs: Callable[[int], str] | None = None,
          empty: str = "nothing yet") -> str:
    rows = list(rows)
    if not rows:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(f"<tr{row_attrs(i) if row_attrs else ''}>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>"
                   for i, r in enumerate(rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Page(Exception):
    """A response other than 200 text/html: a redirect or an error status."""

    def __init__(self, status: str, body: str = "", location: str | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.location = status, body, location


class MemoryPage:
    """The WSGI application. ``read_db``: the reader-role database; ``write_db``: the login
    role's, only when editing is allowed (None: every POST is refused)."""

    def __init__(self, read_db: Database, write_db: Database | None = None, projects: Sequence[str] = ("",),
                 note: str = "") -> None:
        self.read_db, self.write_db = read_db, write_db
        self.projects = list(dict.fromkeys(projects)) or [""]
        self.note = note
        self.token = secrets.token_urlsafe(24)
        self.origin: str | None = None  # set by serve(): "http://host:port"
        self.loopback = True  # set by serve(): bound to a loopback address
        self._embedders: dict[tuple[str, int], Embedder | str] = {}  # loaded, or why it cannot run

    # -- plumbing -------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(environ.get("QUERY_STRING", ""),
                                                             keep_blank_values=True).items()}
        try:
            self._check_host(environ)
            if method == "POST":
                body = self._post(path, environ)
            elif method in ("GET", "HEAD"):
                handler = self.ROUTES.get(path)
                if handler is None:
                    raise Page("404 Not Found", "<p>No such page.</p>")
                body = handler(self, query)
            else:
                raise Page("405 Method Not Allowed", "<p>GET or POST only.</p>")
            status, headers = "200 OK", []
        except Page as page:
            status, body = page.status, page.body
            headers = [("Location", page.location)] if page.location else []
        except (Error, ValueError) as exc:  # pymem's errors and bad input: shown, never a traceback
            status, body, headers = _error_status(exc), _error_body(exc), []
        data = self._layout(body).encode("utf-8")
        start_response(status, [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(data))),
                                *HEADERS, *headers])
        return [] if method == "HEAD" else [data]

    def _check_host(self, environ: dict[str, Any]) -> None:
        """On a loopback address, only a loopback Host header (`is_loopback`: localhost, any
        127.0.0.0/8 literal, [::1], with or without a port): a web page whose name an attacker
        points at a loopback address (DNS rebinding) must not read this one as its own."""
        if self.loopback:
            name = urllib.parse.urlsplit("//" + environ.get("HTTP_HOST", "")).hostname or ""
            if not is_loopback(name):
                raise Page("421 Misdirected Request", "<p>Open this page as 127.0.0.1 or localhost.</p>")

    def _layout(self, body: str) -> str:
        mode = "editing allowed" if self.write_db is not None else "read-only"
        note = f' · {esc(self.note)}' if self.note else ""
        return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>pymem memory</title>'
                f'<style>{STYLE}</style></head><body><nav><a href="/">pymem memory</a> '
                f'<span class="muted">({mode}{note})</span></nav>{body}</body></html>')

    def _memory(self, db: Database, project: str, embedder: Embedder | None = None) -> Memory:
        # reads: no embedder, so no Memory call can embed and store missing vectors (the searches
        # go through pymem.browse); edits: the project's embedder, so a corrected fact gets its vector
        return Memory(db=db, project_id=project, embedder=embedder, window=0)

    def _embedder(self, project: str) -> tuple[Embedder | None, str]:
        """The embedder the page's searches in ``project`` use, and the line saying how they rank."""
        reasons = []
        for e in browse.embedders(self.read_db, project):
            key = (e["name"], e["dimension"])
            if key not in self._embedders:
                try:
                    self._embedders[key] = builtin_embedder(*key) or "not an embedder pymem ships"
                except ConfigError as exc:
                    self._embedders[key] = str(exc)
            found = self._embedders[key]
            if not isinstance(found, str):
                return found, (f"Ranked by words and meaning (the query's vector from {found.name}), "
                               "as Memory.recall and Memory.retrieve rank.")
            reasons.append(f"{e['name']}: {found}")
        if not reasons:
            return None, "Ranked by words only: no vectors are stored in this project."
        return None, ("Ranked by words only: this page cannot run the embedder of this project's vectors "
                      f"({'; '.join(reasons)}).")

    def _edit_form(self, action: str, fields: dict[str, Any], button: str, extra: str = "") -> str:
        hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                         for k, v in {**fields, "token": self.token}.items())
        return f'<form class="inline" method="post" action="{esc(action)}">{hidden}{extra}<button>{esc(button)}</button></form>'

    # -- pages ----------------------------------------------------------------------------
    def home(self, q: dict[str, str]) -> str:
        items = "".join(f'<li><a href="{url("/project", p=p)}">{esc(p) or "(the default project &#39;&#39;)"}</a></li>'
                        for p in self.projects)
        return (f"<h1>Projects</h1><ul>{items}</ul>"
                f'<form method="get" action="/project"><label>Open project <input name="p"></label> '
                f"<button>Open</button></form>"
                f'<p class="muted">Row-level security confines every read to one project, so projects are not '
                f"listed across the database: name others with <code>pymem serve --project NAME</code>.</p>")

    def project(self, q: dict[str, str]) -> str:
        p = q.get("p", "")
        subjects = table(
            ["subject", "active", "superseded", "newest fact"],
            ([f'<a href="{url("/facts", p=p, scope=s["scope"], id=s["scope_id"])}">{esc(s["scope"])}:{esc(s["scope_id"])}</a>',
              esc(s["active"]), esc(s["superseded"]), esc(when(s["newest"]))] for s in browse.subjects(self.read_db, p)),
            empty="no facts")
        users = table(
            ["user", "threads", "messages", "last active"],
            ([f'<a href="{url("/user", p=p, u=u["user_id"])}">{esc(u["user_id"])}</a>', esc(u["threads"]),
              esc(u["messages"]), esc(when(u["updated_at"]))] for u in browse.users(self.read_db, p)),
            empty="no conversations")
        stores = table(
            ["store", "entries", "transcript", "audit", "versions kept", "updated"],
            ([f'<a href="{url("/store", p=p, key=s["store_key"])}">{esc(s["store_key"])}</a>', esc(s["entries"]),
              esc(s["transcript_len"]), "on" if s["audit"] else "off", "yes" if s["keep_versions"] else "no",
              esc(when(s["updated_at"]))] for s in browse.stores(self.read_db, p)),
            empty="no keyed stores")
        return (f"<h1>Project {esc(p) or '&#39;&#39; (default)'}</h1><h2>Fact subjects</h2>{subjects}"
                f"<h2>Users</h2>{users}<h2>Keyed stores</h2>{stores}{self._learning(p)}")

    def _learning(self, p: str) -> str:
        """The project's learning queue (deferred learning: pymem.learning_status, no content)."""
        s = learning_status(self.read_db, p)
        oldest = "" if s.oldest_pending_seconds is None else f"{s.oldest_pending_seconds:.0f} s"
        failures = ", ".join(f"{esc(k)}: {esc(n)}" for k, n in sorted(s.failures.items())) or "none"
        return ("<h2>Learning queue</h2>" + table(
            ["pending (ready)", "running", "dead", "skipped", "oldest pending", "failures by kind",
             "model calls today", "tokens today", "skipped today (cost caps)"],
            [[f"{esc(s.pending)} ({esc(s.ready)})", esc(s.running), esc(s.dead), esc(s.skipped), esc(oldest), failures,
              esc(s.calls_today), esc(s.tokens_today), esc(s.skipped_today)]]))

    def facts(self, q: dict[str, str]) -> str:
        p, scope, sid = q.get("p", ""), q.get("scope", "user"), q.get("id", "")
        show = q.get("superseded") == "1"
        tier = SCOPE_TIER.get(scope)
        if tier is None:
            raise Page("400 Bad Request", f"<p>Unknown scope {esc(scope)}.</p>")
        _need_subject(sid)
        mem = self._memory(self.read_db, p)
        facts = mem.history(tier=tier, id=sid) if show else mem.retrieve(tier=tier, id=sid, limit=1000)
        by_id = {f.id: f for f in facts}
        editing = self.write_db is not None

        def cells(f: Any) -> list[str]:
            fact = esc(f.content)
            if f.superseded_by is not None:
                fact += (f' <span class="marker">{esc(CHANGE_LABEL[change_kind(f, by_id.get(f.superseded_by))])} '
                         f'<a class="superseded-link" href="#fact-{f.superseded_by}">#{f.superseded_by}</a></span>')
            row = [f"#{f.id}", fact, esc(f.source), f"{f.confidence:g}", esc(when(f.created_at))]
            if show:
                row.append(f'<span class="superseded-at">{esc(when(f.superseded_at))}</span>')
            row.append(provenance(f, p, scope, sid))
            if editing:
                fields = {"p": p, "scope": scope, "id": sid, "fact_id": f.id}
                row.append("" if f.superseded_by is not None else
                           self._edit_form("/forget", fields, "Forget") + " " +
                           self._edit_form("/supersede", fields, "Supersede",
                                           '<input name="new" size="30" placeholder="corrected text" required> '))
            return row

        toggle = (f'<a id="toggle-superseded" href="{url("/facts", p=p, scope=scope, id=sid)}">Hide superseded</a>'
                  if show else
                  f'<a id="toggle-superseded" href="{url("/facts", p=p, scope=scope, id=sid, superseded="1")}">'
                  f"Show superseded</a>")
        headers = (["id", "fact", "source", "confidence", "created"] + (["superseded"] if show else [])
                   + ["provenance"] + (["edit"] if editing else []))
        rows = [cells(f) for f in facts]
        body = table(headers, rows, lambda i: (f' id="fact-{facts[i].id}"'
                                               + (' class="superseded"' if facts[i].superseded_by is not None else "")),
                     empty="no facts")
        search = (f'<form method="get" action="/search"><input type="hidden" name="p" value="{esc(p)}">'
                  f'<input type="hidden" name="scope" value="{esc(scope)}"><input type="hidden" name="id" value="{esc(sid)}">'
                  f'<label>Search these facts <input name="q" value="{esc(q.get("q", ""))}"></label> <button>Search</button></form>')
        return (f'<p><a href="{url("/project", p=p)}">← project</a></p><h1>Facts of {esc(scope)}:{esc(sid)}</h1>'
                f"<p>{toggle} · newest first</p>{search}{body}")

    def search(self, q: dict[str, str]) -> str:
        p, scope, sid, text_ = q.get("p", ""), q.get("scope", "user"), q.get("id", ""), q.get("q", "")
        tier = SCOPE_TIER.get(scope)
        if tier is None:
            raise Page("400 Bad Request", f"<p>Unknown scope {esc(scope)}.</p>")
        _need_subject(sid)
        embedder, how = self._embedder(p)
        found, unembedded = (browse.search_facts(self.read_db, scope, sid, text_, p, embedder, k=20)
                             if text_.strip() else ([], []))

        def rows(facts: browse.Rows) -> Iterable[list[str]]:
            return ([f'<a href="{url("/facts", p=p, scope=scope, id=sid)}#fact-{f["id"]}">#{f["id"]}</a>',
                     esc(f["content"]), f'{f["score"]:.3f}' if f["score"] is not None else "", esc(f["source"])]
                    for f in facts)
        return (f'<p><a href="{url("/facts", p=p, scope=scope, id=sid)}">← facts</a></p>'
                f"<h1>Search {esc(scope)}:{esc(sid)} for “{esc(text_)}”</h1>"
                f'<p class="muted" id="ranking">{esc(how)}</p>'
                + table(["id", "fact", "score", "source"], rows(found), empty="no match")
                + not_yet_embedded(embedder, "facts", table(["id", "fact", "score (words)", "source"],
                                                              rows(unembedded)) if unembedded else ""))

    def user(self, q: dict[str, str]) -> str:
        p, u = q.get("p", ""), q.get("u", "")
        threads = browse.threads(self.read_db, u, p)
        mem = self._memory(self.read_db, p)
        parts = [f'<p><a href="{url("/project", p=p)}">← project</a> · '
                 f'<a href="{url("/facts", p=p, scope="user", id=u)}">facts of this user</a></p>'
                 f"<h1>Conversations of {esc(u)}</h1>"]
        parts.append(table(["thread", "messages", "summarized through", "last active"],
                           ([f'<a href="#thread-{esc(t["thread_id"])}">{esc(t["thread_id"])}</a>', esc(t["messages"]),
                             esc(t["summarized_through"]), esc(when(t["updated_at"]))] for t in threads),
                           empty="no threads"))
        for t in threads:
            tid = t["thread_id"]
            summary = mem.summary(user=u, thread=tid)
            window = mem.window(user=u, thread=tid, size=WINDOW)
            found = ""
            if q.get("q", "").strip() and q.get("t") == tid:
                embedder, how = self._embedder(p)
                hits, unembedded = browse.recall_messages(self.read_db, u, q["q"], p, tid, embedder, k=10)

                def rows(messages: browse.Rows) -> Iterable[list[str]]:
                    return ([esc(f'{m["thread_id"]} #{m["seq"]}'), esc(m["role"]), esc(m["content"]),
                             f'{m["score"]:.3f}' if m["score"] is not None else ""] for m in messages)
                found = (f'<h3>Recalled</h3><p class="muted" id="ranking">{esc(how)}</p>'
                         + table(["message", "role", "content", "score"], rows(hits), empty="nothing recalled")
                         + not_yet_embedded(embedder, "messages", table(
                             ["message", "role", "content", "score (words)"], rows(unembedded)) if unembedded else ""))
            parts.append(
                f'<h2 id="thread-{esc(tid)}">Thread {esc(tid)}</h2>'
                f"<h3>Summary</h3>{f'<pre>{esc(summary)}</pre>' if summary else '<p class=muted>no summary yet</p>'}"
                f"<h3>Window (last {len(window)})</h3>"
                + table(["#", "role", "message", "at"],
                        ([esc(m.seq), esc(m.role), esc(m.content), esc(when(m.created_at))] for m in window))
                + f'<form method="get" action="/user"><input type="hidden" name="p" value="{esc(p)}">'
                  f'<input type="hidden" name="u" value="{esc(u)}"><input type="hidden" name="t" value="{esc(tid)}">'
                  f'<label>Recall from this thread <input name="q" value="{esc(q.get("q", "") if q.get("t") == tid else "")}">'
                  f"</label> <button>Recall</button></form>{found}")
        return "".join(parts)

    def turn(self, q: dict[str, str]) -> str:
        """The turn a learned fact names (``metadata["turn"]``): the user's message and the answer,
        and the facts of the user that name this turn."""
        p, u, t, seq = q.get("p", ""), q.get("u", ""), q.get("t", "default"), _seq(q.get("seq", ""))
        messages = browse.messages(self.read_db, u, t, seq, p, max_rows=2)
        taught = [f for f in self._memory(self.read_db, p).history(tier="user", id=u) if taught_by(f) == (t, seq)]
        facts = table(["id", "fact", "change", "now"],
                      ([f'<a href="{url("/facts", p=p, scope="user", id=u, superseded="1")}#fact-{f.id}">#{f.id}</a>',
                        esc(f.content), esc(TURN_CHANGE.get(f.metadata["turn"].get("op"), "learned")),
                        "active" if f.superseded_by is None else f"superseded by #{f.superseded_by}"] for f in taught),
                      empty="no fact of this user names this turn now")
        said = table(["#", "role", "message", "at"],
                     ([esc(m["seq"]), esc(m["role"]), esc(m["content"]), esc(when(m["created_at"]))] for m in messages),
                     empty=f"no message #{seq} in thread {t} (forgotten?)")
        return (f'<p><a href="{url("/user", p=p, u=u)}#thread-{esc(t)}">← conversations of {esc(u)}</a> · '
                f'<a href="{url("/facts", p=p, scope="user", id=u, superseded="1")}">facts of this user</a></p>'
                f"<h1>Turn {esc(t)} #{seq} of {esc(u)}</h1>{said}<h2>Facts this turn taught</h2>{facts}")

    def store(self, q: dict[str, str]) -> str:
        p, key = q.get("p", ""), q.get("key", "")
        entries = table(["path", "kind", "size", "version", "actor", "updated", "sha"],
                        ([f'<a href="{url("/entry", p=p, key=key, path=e["path"])}">{esc(e["path"])}</a>', esc(e["kind"]),
                          esc(e["size"]), esc(e["version"]), esc(e["actor"]), esc(when(e["updated_at"])),
                          f'<code>{esc(e["sha"][:12])}</code>'] for e in browse.store_paths(self.read_db, key, p)),
                        empty="no entries")
        audit = table(["#", "op", "path", "actor", "reason", "at"],
                      ([esc(a["id"]), esc(a["op"]), esc(a["path"]), esc(a["actor"]), esc(a["reason"]), esc(when(a["at"]))]
                       for a in browse.store_audit(self.read_db, key, p)), empty="no audit records")
        return (f'<p><a href="{url("/project", p=p)}">← project</a></p><h1>Store {esc(key)}</h1>'
                f"<h2>Entries</h2>{entries}<h2>Audit tail</h2>{audit}")

    def entry(self, q: dict[str, str]) -> str:
        p, key, path = q.get("p", ""), q.get("key", ""), q.get("path", "")
        e = browse.store_entry(self.read_db, key, path, p)
        if e is None:
            raise NotFoundError(f"no entry {path!r} in store {key!r}")
        versions = table(["version", "kind", "size", "actor", "reason", "at", "sha"],
                         ([esc(v["version"]), esc(v["kind"]), esc(v["size"]), esc(v["actor"]), esc(v["reason"]),
                           esc(when(v["at"])), f'<code>{esc(v["sha"][:12])}</code>']
                          for v in browse.store_versions(self.read_db, key, path, p)),
                         empty="no kept versions (keep_versions is off, or the entry was never replaced)")
        return (f'<p><a href="{url("/store", p=p, key=key)}">← store</a></p><h1>{esc(key)}: {esc(path)}</h1>'
                f'<p class="muted">{esc(e["kind"])}, version {esc(e["version"])}, by {esc(e["actor"])}, '
                f'{esc(when(e["updated_at"]))}</p><pre>{esc(e["content"])}</pre><h2>Versions</h2>{versions}')

    ROUTES: dict[str, Callable[[MemoryPage, dict[str, str]], str]] = {
        "/": home, "/project": project, "/facts": facts, "/search": search, "/user": user, "/store": store,
        "/entry": entry, "/turn": turn,
    }

    # -- editing --------------------------------------------------------------------------
    def _post(self, path: str, environ: dict[str, Any]) -> str:
        if self.write_db is None:
            raise Page("403 Forbidden", "<p>Read-only: start <code>pymem serve --allow-edit</code> to edit.</p>")
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and origin != f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}":
            raise Page("403 Forbidden", "<p>A form from another site.</p>")
        form = {k: v[-1] for k, v in urllib.parse.parse_qs(read_form(environ).decode("utf-8", "replace"),
                                                            keep_blank_values=True).items()}
        if not secrets.compare_digest(form.get("token", ""), self.token):
            raise Page("403 Forbidden", "<p>This form is stale (the server restarted): reload the page.</p>")
        p, scope, sid = form.get("p", ""), form.get("scope", ""), form.get("id", "")
        tier = SCOPE_TIER.get(scope)
        if tier is None:
            raise Page("400 Bad Request", f"<p>Unknown scope {esc(scope)}.</p>")
        fact_id = int(form.get("fact_id", ""))
        mem = self._memory(self.write_db, p, self._embedder(p)[0])
        if path == "/forget":
            mem.forget(tier=tier, id=sid, fact_id=fact_id)
        elif path == "/supersede":
            mem.update(form.get("new", ""), fact_id=fact_id, tier=tier, id=sid, source="manual", metadata=PAGE_EDIT)
        else:
            raise Page("404 Not Found", "<p>No such form.</p>")
        raise Page("303 See Other", location=link("/facts", p=p, scope=scope, id=sid, superseded="1"))


def read_form(environ: dict[str, Any]) -> bytes:
    """A POST's body, exactly ``Content-Length`` bytes of at most `MAX_FORM`: a missing
    length is refused with 411 (so is a chunked body, which wsgiref does not decode), one that
    is not a plain decimal (``-1``, ``1e3``, ``+5``) with 400, a longer one with 413, before
    anything is read; a body that ends early or stalls past the handler's timeout with 400/408."""
    length = environ.get("CONTENT_LENGTH") or ""
    if not length:
        raise Page("411 Length Required", "<p>A form needs a Content-Length.</p>")
    if not (length.isascii() and length.isdigit()):
        raise Page("400 Bad Request", f"<p>Content-Length {esc(length[:40])} is not a length.</p>")
    size = int(length)
    if size > MAX_FORM:
        raise Page("413 Content Too Large", f"<p>A form of at most {MAX_FORM} bytes.</p>")
    try:
        body = environ["wsgi.input"].read(size)
    except TimeoutError:
        raise Page("408 Request Timeout", "<p>The form did not arrive in time.</p>") from None
    if len(body) != size:
        raise Page("400 Bad Request", "<p>The form ended before its Content-Length.</p>")
    return body


def is_loopback(name: str) -> bool:
    """Whether ``name`` (a host name or an address literal, without brackets or port) names this
    machine's loopback interface: ``localhost``, any address of 127.0.0.0/8, or ::1."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def taught_by(fact: Any) -> tuple[str, int] | None:
    """(thread, seq) of the turn that taught ``fact`` (its ``metadata["turn"]``, written by
    ``pymem.turn_record``), or None."""
    turn = fact.metadata.get("turn") if isinstance(fact.metadata, dict) else None
    if isinstance(turn, dict) and isinstance(turn.get("thread_id"), str) and isinstance(turn.get("seq"), int):
        return turn["thread_id"], turn["seq"]
    return None


def change_kind(fact: Any, successor: Any) -> str:
    """How superseded ``fact`` left the active facts, read from its ``successor`` (None: not
    listed): "merged" when the successor existed before (its created_at is not the
    superseded_at that fact_supersede gives both rows when it creates the successor), else the
    op of the turn that wrote it ("update", "delete": retired), "edited" by this page, or
    "superseded" (any other supersede: Memory.update, fact_supersede)."""
    if successor is None:
        return "superseded"
    if successor.created_at != fact.superseded_at:
        return "merged"
    if edited_on_page(successor):
        return "edited"
    op = successor.metadata["turn"].get("op") if taught_by(successor) else None
    return op if op in ("update", "delete") else "superseded"


def edited_on_page(fact: Any) -> bool:
    """Whether ``fact`` is a correction made on this page (its metadata is `PAGE_EDIT`'s)."""
    return isinstance(fact.metadata, dict) and fact.metadata.get("edited_on") == PAGE_EDIT["edited_on"]


def provenance(fact: Any, p: str, scope: str, sid: str) -> str:
    """A fact's trace, the turn that taught it (a link to /turn), a page edit, and the rest of
    its metadata."""
    parts, rest = [], dict(fact.metadata or {})
    if fact.trace_id:
        parts.append(f"trace {esc(fact.trace_id)}")
    taught = taught_by(fact)
    if taught and scope == "user":
        rest.pop("turn")
        parts.append(f'<a class="turn-link" href="{url("/turn", p=p, u=sid, t=taught[0], seq=taught[1])}">'
                     f"taught by turn {esc(taught[0])} #{taught[1]}</a>")
    if edited_on_page(fact):
        rest.pop("edited_on")
        parts.append('<span class="page-edit">edited on the page</span>')
    if rest:
        parts.append(esc(json.dumps(rest, ensure_ascii=False)))
    return " ".join(parts)


def not_yet_embedded(embedder: Embedder | None, what: str, rows_table: str) -> str:
    """The search's rows that have no vector from ``embedder`` yet, matched by their words alone."""
    if not rows_table or embedder is None:
        return ""
    return (f'<h3 id="not-yet-embedded">Not yet embedded</h3><p class="muted">These {what} have no vector from '
            f"{esc(embedder.name)} yet, so they are matched by their words alone (the page writes nothing; "
            f"Memory embeds them on its next recall or retrieve).</p>{rows_table}")


def builtin_embedder(name: str, dimension: int) -> Embedder | None:
    """The embedder pymem ships that makes the vectors named ``name``, ready to run, or None when
    pymem ships none by that name (a custom or remote model). ConfigError: it needs the
    ``[embed]`` (or ``[e5]``) extra, which is not installed."""
    if name == f"hash-{dimension}-v1":
        return HashEmbedder(dimension)
    for shipped in (OnnxMiniLMEmbedder, E5SmallEmbedder):
        if name == shipped.name:
            embedder = shipped()
            embedder.load()
            return embedder
    return None


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT  # StreamRequestHandler: a socket timeout on every read and write

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:  # a client too slow to send its request line or headers: dropped
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # one line per request on stderr, no user data
        sys.stderr.write(f"pymem serve: {self.command} {self.path.split('?')[0]} {args[1] if len(args) > 1 else ''}\n")


def reader_conninfo(conninfo: str, role: str) -> str:
    """``conninfo`` whose sessions start as ``role`` (SET ROLE at connection start). Not a
    boundary: the session may switch back to its login role (``SET ROLE NONE``,
    ``set_config('role', session_user, ...)``); `open_databases` uses it only without
    ``PYMEM_READER_DSN``."""
    options = conninfo_to_dict(conninfo).get("options") or ""
    return make_conninfo(conninfo, options=f"{options} -c role={role}".strip())


def open_databases(settings: Settings, allow_edit: bool) -> tuple[Database, Database | None, str]:
    """(reader database, login database or None, a note on the role reads run as).

    With ``settings.reader_dsn`` (``PYMEM_READER_DSN``) reads connect as that login role; on the
    embedded server without it, as `PAGE_READER`, which ``pymem._page_reader_login``
    creates. That role must not be able to write: neither it nor any role it is a member of may
    be a superuser, bypass row-level security or execute a pymem function the reader role may
    not (named query ``reader_login``; ConfigError otherwise, naming the role). That is the
    boundary: a session cannot gain what its login role lacks. Otherwise reads SET ROLE to the
    reader role at connection start, which keeps the page's own code from writing by mistake
    but can be undone by the session (a warning says so)."""
    login = Database(settings)  # the embedded server starts (and migrates) here when there is no DSN
    role = settings.reader_role or "pymem_reader"
    reader_dsn = settings.reader_dsn
    if not reader_dsn and settings.dsn is None:  # the embedded server, pymem's own: its reader login
        try:
            (made,) = fetch(calls.page_reader_login(login=PAGE_READER), login)
            reader_dsn = make_conninfo(login.conninfo, user=made["login"])
        except Error as exc:
            print(f"pymem serve: cannot create the reader login {PAGE_READER} ({exc}).", file=sys.stderr)
    if reader_dsn:
        try:
            reader = Database(settings.model_copy(update={"dsn": reader_dsn}), migrate=False)
        except Error:
            login.close()
            raise
        try:
            (who,) = fetch(calls.reader_login(reader_role=role), reader)
        except Error:
            reader.close()
            login.close()
            raise
        if who["may_write"]:
            reader.close()
            login.close()
            through = ", ".join(who["may_write"][:3]) + (", ..." if len(who["may_write"]) > 3 else "")
            source = "PYMEM_READER_DSN" if settings.reader_dsn else "the embedded server's page login"
            raise ConfigError(f"{source} logs in as {who['login']}, which can write through {through}: "
                              f"the page's reads need a login role that is only a member of {role} "
                              f"(CREATE ROLE pymem_page LOGIN PASSWORD '...'; GRANT {role} TO pymem_page;)")
        note = f"reads as {who['login']}, a login role that is only a reader"
    else:
        try:
            reader = Database(settings.model_copy(update={"dsn": reader_conninfo(login.conninfo, role)}), migrate=False)
            note = f"reads as {role} (SET ROLE)"
            print(f"pymem serve: reads SET ROLE {role}, which keeps the page from writing by mistake but which a "
                  f"session can undo; for a real boundary set PYMEM_READER_DSN to a login role that is only a "
                  f"member of {role} (docs/memory-page.md).", file=sys.stderr)
        except Error as exc:
            print(f"pymem serve: cannot read as the reader role {role} ({exc}); reading as the login role instead. "
                  f"GRANT {role} TO your login role, or set PYMEM_READER_DSN, to make the page unable to write.",
                  file=sys.stderr)
            reader, note = login, "reads as the login role"
    if not allow_edit:
        if reader is not login:
            login.close()
        return reader, None, note
    return reader, login, note


def serve(app: MemoryPage, host: str, port: int, timeout: float = REQUEST_TIMEOUT) -> Any:
    """Build the HTTP server for ``app`` (serve_forever() runs it); a client that sends nothing
    for ``timeout`` seconds in the middle of a request is dropped."""
    handler = type("_Handler", (_Quiet,), {"timeout": timeout})
    server = make_server(host, port, app, server_class=_Server, handler_class=handler)
    app.origin = f"http://{host if ':' not in host else f'[{host}]'}:{server.server_port}"
    app.loopback = is_loopback(host)
    return server


def warning_for(host: str, allow_edit: bool = False) -> str | None:
    """The warning printed when the page is reachable from other machines (None on a loopback
    address)."""
    if is_loopback(host.strip("[]")):
        return None
    edit = (" and, with --allow-edit, forget and rewrite any of them" if allow_edit else "")
    return (f"pymem serve: WARNING: listening on {host}: anyone who can reach this address can read every "
            f"memory of the projects it names{edit} (there is no authentication, and the edit token is in "
            "every page it serves). Bind to 127.0.0.1 unless you put an authenticating proxy in front.")


def _need_subject(sid: str) -> None:
    """A page of one subject's facts names it: without ``id=`` it would list nobody's (400)."""
    if not sid:
        raise Page("400 Bad Request", "<p>Which subject? This page needs <code>id=</code> (a user, agent or "
                                      "project id) and <code>scope=</code>; the project page links each one.</p>")


def _seq(given: str) -> int:
    """A message number from the query string: a positive integer, else a 400 that says so (not
    Python's ``int()`` message)."""
    if not given.isdigit() or int(given) < 1:
        raise Page("400 Bad Request", f"<p>seq must be a message number (1, 2, ...), not {esc(repr(given))}.</p>")
    return int(given)


def _error_status(exc: Exception) -> str:
    """The HTTP status of a pymem error (or bad input) a page met: the caller's mistake is a 4xx,
    a database that cannot serve the page (not migrated, unreachable) a 503."""
    if isinstance(exc, NotFoundError):
        return "404 Not Found"
    if isinstance(exc, (MigrationError, ConnectionError)):
        return "503 Service Unavailable"
    if isinstance(exc, (ValidationError, ValueError)):
        return "400 Bad Request"
    return "500 Internal Server Error"


def _error_body(exc: Exception) -> str:
    hint = getattr(exc, "hint", None)
    said = str(exc).removesuffix(f" (hint: {hint})") if hint else str(exc)  # the hint once, below
    return (f'<p class="warn">{esc(type(exc).__name__)}: {esc(said)}</p>'
            + (f'<p class="muted">{esc(hint)}</p>' if hint else ""))


def main(settings: Settings, host: str, port: int, allow_edit: bool, projects: Sequence[str]) -> int:
    read_db, write_db, note = open_databases(settings, allow_edit)
    app = MemoryPage(read_db, write_db, projects or [settings.project_id], note)
    warning = warning_for(host, allow_edit)
    if warning:
        print(warning, file=sys.stderr)
    try:
        server = serve(app, host, port)
    except OSError as exc:
        read_db.close()
        if write_db is not None and write_db is not read_db:
            write_db.close()
        if exc.errno == errno.EADDRINUSE:
            print(f"pymem: port {port} is in use (try --port)", file=sys.stderr)
            return 1
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    print(f"pymem serve: {app.origin}/ ({note}; {'editing allowed' if allow_edit else 'read-only'}; "
          f"database: {'PYMEM_DSN' if settings.dsn else 'the embedded server'})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        read_db.close()
        if write_db is not None and write_db is not read_db:
            write_db.close()
    return 0
