"""The browser as the victim: Playwright on the system Chromium, the page's own Content-Security-Policy
in force (no bypass), against the real server and a static snapshot opened from a file:// URL.

A folder that holds markup, `</script>`, `<!--<script>`, U+2028, NaN scores, `javascript:` image
"URLs" and a stored SVG with a script (view_fixtures.hostile_folder) must show every card and run
nothing: a script that ran would set the title to "pwned"."""

from __future__ import annotations

import pytest
from browser_support import needs_chromium, playwright_or_skip

sync_api = playwright_or_skip()

from view_fixtures import PWNED, Server, hostile_folder  # noqa: E402

pytestmark = needs_chromium
TITLE = "caption-debias view"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return hostile_folder(tmp_path_factory.mktemp("hostileb"))


@pytest.fixture(scope="module")
def served(hostile, tmp_path_factory):
    with Server([hostile["folder"]], image_root=hostile["images"], thumbs_dir=tmp_path_factory.mktemp("t")) as s:
        yield s


@pytest.fixture(scope="module")
def svg_served(hostile, tmp_path_factory):
    """A plain folder (nothing hostile but the stored SVG its row points to)."""
    import json

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("svg")
    rows = [{"key": "closer", "image": "evil.svg", "caption": "A drawing. It is a vector file."}]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([root / "t.jsonl"], root / "svg", PrepareOptions(format="table", quiet=True))
    with Server([root / "svg"], image_root=hostile["images"], thumbs_dir=root / "t") as s:
        yield s


@pytest.fixture()
def context(browser):
    ctx = browser.new_context(viewport={"width": 1360, "height": 900})  # the page's policy in force
    ctx.problems = []
    ctx.on("page", lambda pg: pg.on("pageerror", lambda e: ctx.problems.append(str(e))))
    yield ctx
    ctx.close()


def _watch(page, context) -> None:
    page.on("pageerror", lambda e: context.problems.append(str(e)))
    page.on("console", lambda m: context.problems.append(m.text) if "Content Security Policy" in m.text else None)


def test_the_page_works_under_its_policy_and_a_hostile_folder_runs_nothing(served, hostile, context):
    page = context.new_page()
    _watch(page, context)
    res = page.goto(served.url)
    assert "script-src 'self'" in res.headers["content-security-policy"]
    expect = sync_api.expect
    expect(page.locator(".card")).to_have_count(hostile["rows"])
    expect(page.locator("#status")).to_have_text(f"{hostile['rows']} kept rows match")
    expect(page.locator("#rows option")).to_have_count(2 + 2)  # kept, every reason, and the two reasons
    assert page.locator('a[href^="javascript"], a[href^="data:"]').count() == 0
    for i in range(hostile["rows"]):  # every detail opens, with its columns (NaN scores shown as text)
        page.locator(".card").nth(i).click()
        expect(page.locator("#modal table.columns")).to_be_visible()
        assert page.locator('#modal a[href^="javascript"], #modal a[href^="data:"]').count() == 0
        page.keyboard.press("Escape")
    page.select_option("#rows", "removed:")
    expect(page.locator(".card.removed")).to_have_count(hostile["removed"])
    page.locator(".card.removed").first.click()
    expect(page.locator("#modal .pair")).to_be_visible()
    page.wait_for_timeout(300)
    assert page.title() == TITLE and context.problems == []


def test_a_stored_svg_opened_from_the_page_runs_nothing(svg_served, context):
    served = svg_served
    page = context.new_page()
    _watch(page, context)
    page.goto(served.url)
    page.locator('.card[data-key="table/closer"]').click()  # its image is evil.svg
    link = page.locator("#modal a.imglink")
    assert link.get_attribute("href") == "image/0/evil.svg"
    with context.expect_page() as opened:
        link.click()
    tab = opened.value
    try:
        tab.wait_for_load_state()
    except sync_api.Error:
        pass  # a download, not a document
    # the same file typed into the address bar: refused (not a picture), never a document of the viewer's origin
    direct = context.new_page()
    response = direct.goto(served.url + "image/0/evil.svg")
    page.wait_for_timeout(500)
    for p in (page, tab, direct):
        assert p.is_closed() or p.title() != PWNED
    assert page.title() == TITLE and response is not None and response.status == 415


def test_a_hostile_snapshot_opened_from_a_file_shows_every_card_and_runs_nothing(hostile, context, tmp_path):
    from caption_debias.view.data import ViewData
    from caption_debias.view.static import write_static

    data = ViewData([str(hostile["folder"])], str(hostile["images"]))
    out = write_static(
        data, tmp_path / "share" / "snap.html", sample=50, per_reason=5, seed=0, thumbs_dir=tmp_path / "t"
    )
    page = context.new_page()
    _watch(page, context)
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(out.as_uri())
    expect = sync_api.expect
    expect(page.locator(".card")).to_have_count(hostile["rows"])
    assert "static snapshot" in page.locator(".badge.snap").inner_text()
    page.select_option("#rows", "removed:")
    expect(page.locator(".card.removed")).to_have_count(hostile["removed"])
    page.locator(".card.removed").first.click()
    expect(page.locator("#modal .pair")).to_be_visible()
    page.wait_for_timeout(300)
    assert page.title() == TITLE and context.problems == [] and fetched == []
